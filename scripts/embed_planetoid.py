"""Convert the public Planetoid raw files of Cora and CiteSeer into the compact
files shipped in ``oversmooth/_data`` (run once; the output is committed).

    python scripts/embed_planetoid.py [--raw ../shared/data/planetoid] [--out oversmooth/_data]

Each ``<name>.npz`` holds (no pickles, ``numpy.load(allow_pickle=False)`` reads it):
the non-zero entries of the binary bag-of-words features (row and column
indices), the undirected edges once each (``u < v``), the labels and the public
split as index arrays.  ``oversmooth.data`` rebuilds a PyG ``Data`` equal to
``torch_geometric.datasets.Planetoid`` on the same raw files.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

NAMES = {"cora": "Cora", "citeseer": "CiteSeer"}


def convert(raw_root: Path, out_dir: Path) -> None:
    from torch_geometric.datasets import Planetoid

    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for key, pyg_name in NAMES.items():
            shutil.copytree(raw_root / pyg_name / "raw", Path(tmp) / pyg_name / "raw")
            data = Planetoid(root=tmp, name=pyg_name)[0]
            x = data.x
            if not bool(((x == 0) | (x == 1)).all()):
                raise SystemExit(f"{pyg_name}: features are not binary; extend the format first")
            rows, cols = x.nonzero(as_tuple=True)
            src, dst = data.edge_index
            upper = src < dst
            if int((src == dst).sum()) or 2 * int(upper.sum()) != data.num_edges:
                raise SystemExit(f"{pyg_name}: edge list is not a symmetric simple graph")
            path = out_dir / f"{key}.npz"
            np.savez_compressed(
                path,
                num_nodes=np.int64(data.num_nodes),
                num_features=np.int64(x.size(1)),
                x_row=rows.numpy().astype(np.int32),
                x_col=cols.numpy().astype(np.int32),
                edges=torch.stack([src[upper], dst[upper]]).numpy().astype(np.int32),
                y=data.y.numpy().astype(np.int8),
                train_index=data.train_mask.nonzero().flatten().numpy().astype(np.int32),
                val_index=data.val_mask.nonzero().flatten().numpy().astype(np.int32),
                test_index=data.test_mask.nonzero().flatten().numpy().astype(np.int32),
            )
            print(f"{path}: {path.stat().st_size / 1024:.0f} KiB ({data})")


def main() -> None:
    here = Path(__file__).resolve().parents[1]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raw", type=Path, default=here.parent / "shared" / "data" / "planetoid")
    parser.add_argument("--out", type=Path, default=here / "src" / "oversmooth" / "_data")
    args = parser.parse_args()
    convert(args.raw, args.out)


if __name__ == "__main__":
    main()
