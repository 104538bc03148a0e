"""Write what a dataset's prefetch fetched: each downloaded file and each model file with its size.

    python -m pipeline.data.prefetch --dataset nq --download FILE ... --model FOLDER ... --out JSON

The record a user reads before moving the fetched files to where the cluster's jobs read them; a model
folder's files are those its ``prefetch.json`` lists (pipeline.data.models).
"""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.core.cli import run_main, stage_parser, start_stage
from pipeline.core.storage import DataError, read_json_object, write_json
from pipeline.data.models import MARKER


def summary(dataset: str, downloads: list[str], models: list[str]) -> dict:
    """{dataset, bytes, files: {path: size}} of ``downloads`` (files) and ``models`` (fetched folders)."""
    files = {path: os.path.getsize(path) for path in downloads}
    for folder in models:
        record = read_json_object(Path(folder) / MARKER, keys=("files",))
        entries = record["files"]
        for name, entry in entries.items() if isinstance(entries, dict) else [(None, None)]:
            if not isinstance(entry, dict) or not isinstance(entry.get("size"), int):
                raise DataError(
                    "expected {file: {size, sha256}}: fetch the model again",
                    file=Path(folder) / MARKER,
                    field="files",
                )
            files[f"{folder}/{name}"] = entry["size"]
    return {"dataset": dataset, "bytes": sum(files.values()), "files": files}


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser("pipeline.data.prefetch", __doc__)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--download", nargs="*", default=[], help="downloaded files")
    parser.add_argument("--model", nargs="*", default=[], help="fetched model folders")
    parser.add_argument("--out", required=True)
    parser.add_argument("--log", default=None)
    args = parser.parse_args(argv)
    start_stage(args.log)
    write_json(args.out, summary(args.dataset, args.download, args.model))
    return 0


if __name__ == "__main__":
    run_main(main)
