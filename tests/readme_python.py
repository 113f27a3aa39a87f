"""Run the README's Python examples as a reader would paste them.

usage: readme_python.py README.md "SECTION" [...]

Each named "## SECTION" has its ```python blocks run in order in one namespace (the later
blocks of a section build on the earlier ones, as the README reads). Exits non-zero on
the first block that raises, naming the section and the block's first line in README.md.
"""
import sys, traceback


def blocks(path, section):
    lines = open(path, encoding="utf-8").read().split("\n")
    inside, code, start = False, None, 0
    for n, line in enumerate(lines, 1):
        if line.startswith("## "):
            inside = line[3:].strip() == section
        elif inside and code is None and line.strip() == "```python":
            code, start = [], n + 1
        elif code is not None and line.strip() == "```":
            yield start, "\n".join(code)
            code = None
        elif code is not None:
            code.append(line)


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__.strip())
    path = argv[1]
    for section in argv[2:]:
        found = list(blocks(path, section))
        if not found:
            sys.exit(f"{path}: no ```python block under '## {section}'")
        scope = {"__name__": "__readme__"}
        for start, code in found:
            print(f"---- {path}:{start} ({section})", flush=True)
            try:
                exec(compile(code, f"{path}:{start}", "exec"), scope)
            except Exception:
                traceback.print_exc()
                sys.exit(f"{path}:{start}: the example under '## {section}' failed")
    print("all examples ran")


if __name__ == "__main__":
    main(sys.argv)
