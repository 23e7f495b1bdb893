#!/usr/bin/env python
"""Render README.md from nbs/index.ipynb with nbconvert (quarto, which nbdev_readme needs, is not installable here).

  python tools/make_readme.py          # write README.md
  python tools/make_readme.py --check  # exit 1 if README.md is stale
Cells starting with `#| hide` are dropped and `#|` directive lines removed, as nbdev would.
"""
import sys
from pathlib import Path
import nbformat
from nbconvert import MarkdownExporter

ROOT = Path(__file__).resolve().parents[1]

def render(nb_path=ROOT / "nbs" / "index.ipynb") -> str:
    nb = nbformat.read(nb_path, as_version=4)
    cells = []
    for c in nb.cells:
        src = c.source.lstrip()
        if c.cell_type == "code" and src.startswith("#| hide"): continue
        if c.cell_type == "code":
            c.source = "\n".join(l for l in c.source.splitlines() if not l.lstrip().startswith("#|")).strip("\n")
            c.outputs = []
        cells.append(c)
    nb.cells = cells
    body, _ = MarkdownExporter().from_notebook_node(nb)
    note = "<!-- generated from nbs/index.ipynb by tools/make_readme.py: edit the notebook, not this file -->\n\n"
    return note + body.strip() + "\n"

if __name__ == "__main__":
    text, readme = render(), ROOT / "README.md"
    if "--check" in sys.argv:
        if not readme.exists() or readme.read_text() != text:
            sys.exit("README.md is stale: run `make readme` (python tools/make_readme.py) and commit it")
        print("README.md is up to date")
    else:
        readme.write_text(text); print(f"wrote {readme}")
