"""Structure report: module sizes, export-cell sizes, private cross-module imports and layer violations.

Usage: python tools/structure_report.py [--check]
With --check it exits 1 when a rule of issue 16 is broken (a module over 700 lines, an export cell over 80 lines or
a median over 25, a `from .x import _name` across modules, an import that points up the layers).
"""
import ast, json, statistics, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "acrb_nb"
# Layers, lowest first: a module may import only from its own layer or lower ones (studies never from each other).
LAYERS = [
    ("core", ["core"]),
    ("infrastructure", ["store", "runner", "stats", "data", "testing"]),
    ("adapters", ["adapters"]),
    ("execution", ["ray_exec", "execution", "validation", "labels", "planning"]),
    ("studies", ["acrb", "toxicity", "fairness", "iat"]),
    ("reports", ["report", "smoke", "params"]),
]
STUDIES = {"acrb", "toxicity", "fairness", "iat"}

def layer_of(mod):
    top = mod.split(".")[1] if mod.startswith("acrb_nb.") else mod
    for i, (_, names) in enumerate(LAYERS):
        if top in names: return i, top
    return None, top

def modname(path):
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__": parts = parts[:-1]
    return ".".join(parts)

def resolve(mod, node, is_pkg):
    if node.level == 0: return node.module or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))

def imports(path):
    mod, is_pkg = modname(path), path.name == "__init__.py"
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = resolve(mod, node, is_pkg)
            if target.startswith("acrb_nb"):
                yield target, [a.name for a in node.names], node.lineno
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("acrb_nb"): yield a.name, [], node.lineno

def main(check=False):
    bad = []
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in sorted(PKG.rglob("*.py"))
             if p.name != "_modidx.py"}
    big = {k: v for k, v in sizes.items() if v > 700}
    print(f"modules: {len(sizes)}, largest {max(sizes.values())} lines; over 700: {big or 'none'}")
    bad += [f"module over 700 lines: {k} ({v})" for k, v in big.items()]
    cells = []
    for nb in sorted((ROOT / "nbs").glob("*.ipynb")):
        for c in json.loads(nb.read_text())["cells"]:
            src = "".join(c["source"])
            if c["cell_type"] == "code" and src.lstrip().startswith(("#| export", "#|export")):
                cells.append((len(src.splitlines()), nb.name))
    n = [x for x, _ in cells]
    over = sorted([(x, f) for x, f in cells if x > 80], reverse=True)
    q = statistics.quantiles(n, n=10)
    print(f"export cells: {len(n)}, median {statistics.median(n)}, p90 {q[-1]:.0f}, max {max(n)}, "
          f"over 25: {sum(x > 25 for x in n)}, over 80: {len(over)} {over[:10]}")
    if statistics.median(n) > 25: bad.append(f"median export cell {statistics.median(n)} > 25 lines")
    bad += [f"export cell over 80 lines: {f} ({x})" for x, f in over]
    for p in sorted(PKG.rglob("*.py")):
        if p.name == "_modidx.py": continue
        mod = modname(p)
        li, top = layer_of(mod)
        for target, names, line in imports(p):
            priv = [x for x in names if x.startswith("_") and not x.startswith("__")]
            same = target == mod or (p.name == "__init__.py" and target.startswith(mod + "."))
            if priv and not same: bad.append(f"{p.relative_to(ROOT)}:{line} imports private {priv} from {target}")
            tj, ttop = layer_of(target)
            if li is None or tj is None or ttop == top: continue
            if tj > li: bad.append(f"{p.relative_to(ROOT)}:{line} imports up the layers: {mod} ({LAYERS[li][0]}) -> {target} ({LAYERS[tj][0]})")
            elif tj == li and top in STUDIES and ttop in STUDIES:
                bad.append(f"{p.relative_to(ROOT)}:{line} imports a sibling study: {mod} -> {target}")
    attrs = [f"{p.relative_to(ROOT)}:{i}" for p in sorted(PKG.rglob("*.py")) if p.name != "_modidx.py"
             for i, l in enumerate(p.read_text().splitlines(), 1) if ".attrs" in l]
    if attrs: bad.append(f"DataFrame.attrs used at {attrs}")
    print("\n".join(f"  ! {b}" for b in bad) or "  no rule broken")
    return 1 if (check and bad) else 0

if __name__ == "__main__":
    sys.exit(main("--check" in sys.argv))
