"""The model zoo: LayerNorm modes, multi-head message passing, blocks, models."""

from oversmooth.nn.block import FFN, Block
from oversmooth.nn.conv import CONVS, KERNELS, GraphContext, MultiHeadMessagePassing, set_kernel
from oversmooth.nn.edgeset import EdgeSetModel, line_graph
from oversmooth.nn.model import MODELS, DepthModel, ModelConfig, build_model, model_from_config
from oversmooth.nn.norm import LayerNorm

__all__ = [
    "CONVS",
    "MODELS",
    "Block",
    "DepthModel",
    "EdgeSetModel",
    "FFN",
    "GraphContext",
    "KERNELS",
    "LayerNorm",
    "ModelConfig",
    "MultiHeadMessagePassing",
    "build_model",
    "line_graph",
    "model_from_config",
    "set_kernel",
]
