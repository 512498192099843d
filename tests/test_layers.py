"""The house's one rule, checked on the code's own imports: data flows YAML → model →
symbolic → C → runtime → solvers → CLI, and a module imports only from the layers below
it (docs/architecture.md), never another module's private names."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mbgen"

DOCS = PACKAGE.parent / "docs" / "architecture.md"


def documented_layers() -> list[set[str]]:
    """The layer table of docs/architecture.md, bottom to top: the rule lives there."""
    layers = []
    for line in DOCS.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].isdigit():
            layers.append({name.strip("`") for name in cells[1].split()})
    return layers


LAYERS = documented_layers()
LAYER = {name: level for level, names in enumerate(LAYERS) for name in names}
#: Command-line modules every command may use; a command never imports another command.
CLI_HELPERS = {"mbgen.cli", "mbgen.cli.conventions", "mbgen.cli.states"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) of every mbgen import in the file, function-level ones too."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and (
                node.module == "mbgen" or node.module.startswith("mbgen.")):
            found.append((node.lineno, node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name, []) for a in node.names
                      if a.name == "mbgen" or a.name.startswith("mbgen.")]
    return found


def test_every_import_runs_down_the_layers() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = module_name(path)
        if importer == "mbgen":
            continue  # the package's face: mbgen.load() hands on to mbgen.loading
        top = importer.split(".")[1]
        assert top in LAYER, f"{importer}: add its package to LAYERS"
        for line, module, names in imports(path):
            where = f"{path.relative_to(PACKAGE.parent)}:{line}"
            if module == "mbgen":
                wrong.append(f"{where}: imports the package root {names}; import the leaf")
                continue
            target = module.split(".")[1]
            if target not in LAYER:
                wrong.append(f"{where}: {module} is in no layer")
            elif target != top and LAYER[target] >= LAYER[top]:
                wrong.append(f"{where}: {importer} (layer {LAYER[top]}) imports {module} "
                             f"(layer {LAYER[target]})")
            elif top == "cli" and target == "cli" and module not in CLI_HELPERS \
                    and importer != "mbgen.cli.main":
                wrong.append(f"{where}: a command imports another command's {module}")
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private:
                wrong.append(f"{where}: imports private names {private} of {module}")
    assert not wrong, "\n".join(wrong)


def test_the_layers_name_every_package() -> None:
    """A new package must say where it stands."""
    packages = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
                if (p.suffix == ".py" and p.stem != "__init__")
                or (p.is_dir() and (p / "__init__.py").exists())}
    assert packages == set(LAYER)


def test_the_readme_layout_lists_every_package() -> None:
    """The README's layout table is checked against the real tree."""
    text = (PACKAGE.parent / "README.md").read_text()
    layout = text[text.index("## Layout"):text.index("\n## ", text.index("## Layout") + 1)]
    packages = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir()
                      and ((p / "__init__.py").exists() or p.name == "csrc"))
    missing = [name for name in packages if f"`mbgen/{name}/`" not in layout]
    assert not missing, f"README.md's Layout lacks {missing}"


ROOT = PACKAGE.parent


def defined_names(module: Path) -> set[str]:
    """The top-level functions, classes and assigned names of a module, and its classes'
    members as ``Class.member``."""
    names: set[str] = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        if isinstance(node, ast.ClassDef):
            names |= {f"{node.name}.{member.name}" for member in node.body
                      if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return names


def cited_target_missing(token: str) -> str | None:
    """Why a name docs/architecture.md cites in backquotes names nothing in the tree, or
    None: a path (`cli/simulate.py`, `csrc/*.cpp`), a module's member
    (`io/datafile.read_data`, `calls.Core`), or a module, package or top-level name."""
    token = token.removesuffix("()")
    if not token or any(c in token for c in " (=@,"):
        return None  # a snippet of code, not a name
    if "/" in token:
        if any(True for base in (ROOT, PACKAGE) for _ in base.glob(token.rstrip("/"))):
            return None
        folder, _, leaf = token.rpartition("/")
        module, _, member = leaf.partition(".")
        found = [m for base in (ROOT, PACKAGE) for m in [base / folder / f"{module}.py"]
                 if m.exists()]
        if not found or not member:
            return f"`{token}`: no file {token}"
        if member not in defined_names(found[0]):
            return f"`{token}`: {found[0].relative_to(ROOT)} defines no {member}"
        return None
    *owner, name = token.removeprefix("mbgen.").split(".")
    if owner:
        modules = [m for m in PACKAGE.rglob(f"{owner[-1]}.py")]
        if not any(name in defined_names(m) for m in modules) and not list(
                PACKAGE.rglob(f"{owner[-1]}/{name}.py")):
            return f"`{token}`: no module {owner[-1]} defining {name}"
        return None
    if list(PACKAGE.rglob(f"{name}.py")) or list(PACKAGE.rglob(name)) or any(
            name in defined_names(m) for m in PACKAGE.rglob("*.py")) or any(
            name in j2.read_text() for j2 in (ROOT / "templates").glob("*.j2")):
        return None
    return f"`{token}`: names no module, package or definition in mbgen/"


def test_the_architecture_page_names_what_exists() -> None:
    """Every module, file and name docs/architecture.md cites is in the tree: a page that
    describes a house that was rebuilt misleads whoever adds to it."""
    import re

    tokens = re.findall(r"`([^`]+)`", DOCS.read_text())
    missing = [why for why in map(cited_target_missing, tokens) if why]
    assert not missing, "\n".join(missing)
