"""The model zoo: LayerNorm modes, per-convolution scorers run by one multi-head message
passing core, hook points, blocks, models."""

from oversmooth.nn.block import FFN, Block
from oversmooth.nn.conv import CONVS, KERNELS, GraphContext, MultiHeadMessagePassing, set_kernel
from oversmooth.nn.edgeset import EdgeSetModel, line_graph
from oversmooth.nn.hooks import AttentionWeights, HookPoint
from oversmooth.nn.model import (
    MODELS,
    DepthModel,
    ModelConfig,
    build_model,
    model_from_config,
    seeded_models,
)
from oversmooth.nn.norm import LayerNorm
from oversmooth.nn.scorers import SCORERS, GATScorer, GCNScorer, SANScorer, Scorer, make_scorer

__all__ = [
    "CONVS",
    "MODELS",
    "SCORERS",
    "AttentionWeights",
    "Block",
    "DepthModel",
    "EdgeSetModel",
    "FFN",
    "GATScorer",
    "GCNScorer",
    "GraphContext",
    "HookPoint",
    "KERNELS",
    "LayerNorm",
    "ModelConfig",
    "MultiHeadMessagePassing",
    "SANScorer",
    "Scorer",
    "build_model",
    "line_graph",
    "make_scorer",
    "model_from_config",
    "seeded_models",
    "set_kernel",
]
