"""scripts/gpu_check.sh's pre-flight, on whatever Python the GPU node has: one line saying what is missing.

  python scripts/gpu_preflight.py before --bundle DIR [--device cuda|cpu]   # before installing anything
  python scripts/gpu_preflight.py after [--device cuda|cpu]                 # the bundle installed

`before` checks the Python version against the project's (pyproject requires-python), that the bundle
has this Python's files (site-cpXY.tar.xz), the tools the install uses (tar, xz), torch on this Python,
and nvidia-smi for --device cuda. `after` imports every module the check needs and prints their
versions, and says whether faiss can use the GPU (faiss-cpu is what the bundle carries). Exit 1 when
anything is missing, so the node's minutes are not spent on a run that cannot pass.
Standard library only and Python 3.8 syntax: it must run, and report, on a Python the project does not
support.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# module -> distribution, for what the check imports (pyproject's dependencies without the optional
# backends: openvino, matplotlib) plus the test runner
NEEDED = {
    "torch": "torch",
    "transformers": "transformers",
    "tokenizers": "tokenizers",
    "safetensors": "safetensors",
    "numpy": "numpy",
    "scipy": "scipy",
    "pandas": "pandas",
    "pyarrow": "pyarrow",
    "yaml": "PyYAML",
    "regex": "regex",
    "rich": "rich",
    "faiss": "faiss-cpu",
    "bm25s": "bm25s",
    "Stemmer": "PyStemmer",
    "ijson": "ijson",
    "pydantic": "pydantic",
    "snakemake": "snakemake",
    "pytest": "pytest",
    "xdist": "pytest-xdist",
}


def required_python() -> tuple[int, int]:
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'requires-python\s*=\s*">=\s*(\d+)\.(\d+)', text)
    return (int(match.group(1)), int(match.group(2))) if match else (3, 11)


def before(bundle: Path, device: str) -> list[str]:
    missing = []
    need = required_python()
    here = sys.version_info[:2]
    tag = "cp%d%d" % here
    if here < need:
        missing.append("Python >= %d.%d (this is %d.%d; pyproject requires-python)" % (need + here))
    if bundle.is_dir():
        if not (bundle / "site-common.tar.xz").is_file():
            missing.append("%s/site-common.tar.xz (run scripts/gpu_bundle.sh)" % bundle)
        if not (bundle / ("site-%s.tar.xz" % tag)).is_file():
            built = sorted(p.name[5:-7] for p in bundle.glob("site-cp*.tar.xz"))
            missing.append("the bundle's files for %s (built for: %s)" % (tag, " ".join(built) or "none"))
    else:
        missing.append("the bundle %s (scripts/gpu_bundle.sh builds it)" % bundle)
    for tool in ("tar", "xz"):
        if shutil.which(tool) is None:
            missing.append(tool)
    if importlib.util.find_spec("torch") is None:
        missing.append("torch on %s" % sys.executable)
    if device == "cuda" and shutil.which("nvidia-smi") is None:
        missing.append("nvidia-smi")
    return missing


def after(device: str, site: Path | None) -> tuple[list[str], list[str]]:
    """What will not import, and each module's version; `*` marks one loaded from the bundle's site."""
    missing, versions = [], []
    for module, dist in NEEDED.items():
        try:
            imported = importlib.import_module(module)
        except Exception as exc:  # an ABI mismatch raises ImportError or worse; each one is named
            missing.append(
                "%s (%s: %s)" % (dist, type(exc).__name__, str(exc).splitlines()[0][:80] if str(exc) else "")
            )
            continue
        where = str(Path(getattr(imported, "__file__", None) or "").resolve())
        carried = site is not None and where.startswith(str(site.resolve()) + "/")
        versions.append("%s %s%s" % (dist, getattr(imported, "__version__", "?"), "*" if carried else ""))
    if device == "cuda" and not missing:
        import torch

        if not torch.cuda.is_available():
            missing.append("a CUDA device visible to torch %s" % torch.__version__)
    return missing, versions


def faiss_gpu() -> str:
    try:
        import faiss
    except Exception:
        return "faiss: not importable"
    if hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0:
        return "faiss on the GPU: available (%d GPUs)" % faiss.get_num_gpus()
    return "faiss on the GPU: unchecked (faiss-cpu carried; faiss-gpu's wheels do not fit the transfer)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=["before", "after"])
    ap.add_argument("--bundle", type=Path, default=REPO / ".gpu_bundle")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--site", type=Path, default=None, help="where the bundle was installed")
    args = ap.parse_args(argv)
    where = "python %s at %s" % (sys.version.split()[0], sys.executable)
    if args.stage == "before":
        missing = before(args.bundle, args.device)
        print(
            "pre-flight (%s): %s"
            % (where, "missing: " + "; ".join(missing) if missing else "nothing missing")
        )
        return 1 if missing else 0
    missing, versions = after(args.device, args.site)
    print("imports (%s): %s" % (where, "missing: " + "; ".join(missing) if missing else "nothing missing"))
    print("versions (* from the bundle): " + ", ".join(versions))
    print(faiss_gpu())
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
