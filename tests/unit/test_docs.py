"""The documentation holds together: relative links resolve (files and headings), the README
stays a front page (its two set-up commands near the top, under 15,000 bytes), and the
configuration table in docs/operations.md matches ``app.core.settings.Settings``."""

from __future__ import annotations

import ast
import re
import unicodedata
from pathlib import Path

import msgspec
import pytest

from app.completion.catalog import AUTO_ROUTES, DEFAULT_ALIASES
from app.core.settings import ENV_PREFIX, Settings
from app.http.streams import STREAM_ROUTES
from app.kv.fields import AccountField, KeyField

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
OPERATIONS = ROOT / "docs" / "operations.md"
API = ROOT / "docs" / "api.md"
SETTINGS_SOURCE = ROOT / "app" / "core" / "settings.py"
README_MAX_BYTES = 15_000
DOCS = [
    README,
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "bench" / "README.md",
    ROOT / "bench" / "CHANGELOG.md",
]

_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose_lines(text: str) -> list[str]:
    """The lines of a Markdown file outside fenced code blocks."""
    out: list[str] = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its rendered text lowercased, punctuation dropped
    (letters, digits, '_' and '-' stay), spaces turned into '-'."""
    text = _CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link renders as its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("*", "")
    kept = []
    for ch in text.lower():
        cat = unicodedata.category(ch)
        if ch in "-_ " or cat[0] in "LN":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, with GitHub's -1, -2… for repeats."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        m = _HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def relative_links(path: Path) -> list[str]:
    """Link and image targets of a Markdown file that point inside the repository."""
    targets: list[str] = []
    for line in prose_lines(path.read_text(encoding="utf-8")):
        line = _CODE_SPAN.sub("", line)
        for m in _LINK.finditer(line):
            target = m.group(1)
            if not _SCHEME.match(target) and not target.startswith("//"):
                targets.append(target)
    return targets


def test_the_documents_exist() -> None:
    for path in DOCS:
        assert path.is_file(), path
    assert {p.name for p in DOCS} >= {"api.md", "operations.md", "architecture.md"}


def test_slug_follows_githubs_rules() -> None:
    assert slug("Admin commands: inspect, reconcile, rebuild") == (
        "admin-commands-inspect-reconcile-rebuild"
    )
    assert slug("The layout of `app/`") == "the-layout-of-app"
    assert slug("Usage: flusher exactly-once") == "usage-flusher-exactly-once"
    assert slug("`SVC_UPSTREAM_CLIENT` and [bench](x.md)") == "svc_upstream_client-and-bench"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    broken: list[str] = []
    for target in relative_links(doc):
        file_part, _, anchor = target.partition("#")
        dest = (doc.parent / file_part).resolve() if file_part else doc
        if not dest.exists():
            broken.append(f"{target}: no such file")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)


def test_readme_is_a_front_page() -> None:
    size = len(README.read_bytes())
    assert size < README_MAX_BYTES, f"README.md is {size} bytes, over {README_MAX_BYTES}"
    # The two set-up commands, each in a code block, within the first 40 lines.
    head = README.read_text(encoding="utf-8").splitlines()[:40]
    blocks: list[str] = []
    inside: list[str] | None = None
    for line in head:
        if _FENCE.match(line):
            if inside is None:
                inside = []
            else:
                blocks.append("\n".join(inside))
                inside = None
        elif inside is not None:
            inside.append(line)
    commands = [b.split("#")[0].strip() for b in blocks]
    assert "make run" in commands
    assert "make test" in commands


# --- The configuration table against the settings ---------------------------------------


def field_docstrings() -> dict[str, str]:
    """Each ``Settings`` field's docstring: the string literal right after its annotation."""
    tree = ast.parse(SETTINGS_SOURCE.read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Settings")
    docs: dict[str, str] = {}
    body = cls.body
    for node, nxt in zip(body, [*body[1:], None], strict=True):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        if (
            isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = nxt.value.value.strip()
    return docs


def shown_default(value: object) -> str | None:
    """How the table writes a default: the value as the variable would be set, or None
    for "unset" (no value, or an empty string)."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def config_rows() -> dict[str, str]:
    """``SVC_*`` variable → its Default cell, from the table under "## Configuration"."""
    text = OPERATIONS.read_text(encoding="utf-8")
    section = text.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith(f"`{ENV_PREFIX}"):
            continue
        m = re.fullmatch(r"`(SVC_[A-Z0-9_]+)`", cells[0])
        assert m, f"one variable per row: {cells[0]}"
        assert m.group(1) not in rows, f"{m.group(1)} has two rows"
        rows[m.group(1)] = cells[1]
    return rows


def test_every_setting_has_a_docstring() -> None:
    docs = field_docstrings()
    missing = [f for f in Settings.__struct_fields__ if not docs.get(f)]
    assert not missing, f"fields without a docstring in app/core/settings.py: {missing}"


def test_configuration_table_matches_the_settings() -> None:
    rows = config_rows()
    fields = {ENV_PREFIX + f.name.upper(): f for f in msgspec.structs.fields(Settings)}
    assert sorted(set(fields) - set(rows)) == [], "settings missing from docs/operations.md"
    assert sorted(set(rows) - set(fields)) == [], "rows that name no setting"
    wrong: list[str] = []
    for var, info in fields.items():
        assert info.default is not msgspec.NODEFAULT, f"{var} has no default"
        expected = shown_default(info.default)
        cell = rows[var]
        if expected is None:
            if not cell.startswith("unset"):
                wrong.append(f"{var}: default is unset, table says {cell!r}")
        else:
            first = re.match(r"`([^`]*)`", cell)
            if not first or first.group(1) != expected:
                wrong.append(f"{var}: default is `{expected}`, table says {cell!r}")
    assert not wrong, "; ".join(wrong)


def test_the_top_level_lua_link_is_the_scripts_folder() -> None:
    """The design card's `lua/` is a link to the package data the ledger loads."""
    link = ROOT / "lua"
    assert link.is_symlink()
    assert link.resolve() == (ROOT / "app" / "credits" / "lua").resolve()
    assert (link / "reserve.lua").is_file()


# --- The Redis key layout table against the hash fields ---------------------------------


def layout_row(key: str) -> str:
    """The "Holds" cell of the key layout table's row for ``key`` (as the table names it)."""
    text = OPERATIONS.read_text(encoding="utf-8")
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] == f"`{key}`":
            return cells[2]
    raise AssertionError(f"no row for {key} in docs/operations.md")


@pytest.mark.parametrize(
    ("key", "fields"),
    [("svc:{sN}:acct:<pid>", AccountField), ("svc:{sN}:key:<kid>", KeyField)],
    ids=["account", "api-key"],
)
def test_the_key_layout_names_every_field_of_a_hash(key: str, fields: type) -> None:
    """Each field ``app/kv/fields.py`` names for the hash is in its row, as `name`."""
    holds = layout_row(key)
    names = [v for k, v in vars(fields).items() if k.isupper() and isinstance(v, str)]
    missing = [name for name in names if f"`{name}`" not in holds]
    assert missing == [], f"{key}: fields missing from docs/operations.md: {missing}"


def test_safe_retries_name_every_stream_that_takes_a_key() -> None:
    """Every streaming route takes ``Idempotency-Key`` (``app.http.streams``): api.md's
    "Safe retries" section names each of them."""
    text = API.read_text(encoding="utf-8")
    section = text.split("\n## Safe retries: Idempotency-Key\n", 1)[1].split("\n## ", 1)[0]
    paths = sorted({api.path for api in STREAM_ROUTES.values()})
    missing = [path for path in paths if f"POST {path}`" not in section]
    assert missing == [], f"docs/api.md's Safe retries do not name {missing}"


def test_no_document_says_the_data_dir_holds_logs() -> None:
    """svc logs to stderr (``app.core.logs``); the data folder holds the embedded Valkey,
    SQLite and generated secrets. A line that names ``SVC_DATA_DIR`` and logs must say
    where logs do go."""
    wrong = [
        f"{doc.relative_to(ROOT)}: {line.strip()}"
        for doc in DOCS
        for line in prose_lines(doc.read_text(encoding="utf-8"))
        if "SVC_DATA_DIR" in line and re.search(r"\blogs?\b", line) and "stderr" not in line
    ]
    assert wrong == [], wrong


def test_the_readmes_prices_are_the_default_catalogues() -> None:
    """The front page's prices, cached ones included, as svc charges them: the cached-input
    price is a quarter of the input price rounded up (``quarter_up``), not a quarter."""
    text = " ".join(README.read_text(encoding="utf-8").split())
    prices = [DEFAULT_ALIASES[alias].price for alias in AUTO_ROUTES]
    first, *rest = zip(AUTO_ROUTES, prices, strict=True)
    assert f"`{first[0]}` {first[1].input} in / {first[1].output} out" in text
    for alias, price in rest:
        assert f"`{alias}` {price.input} / {price.output}" in text
    *head, last = (str(p.cached_input) for p in prices)
    assert f"cached prompt tokens {', '.join(head)} and {last}" in text
    assert "quarter of the input price, rounded up" in text


_TOML_BLOCK = re.compile(r"^```toml\n(.*?)^```", re.MULTILINE | re.DOTALL)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_toml_example_parses(doc: Path) -> None:
    """An operator copies these into a models file: each must be TOML (an inline table, for
    one, cannot go over two lines)."""
    import tomllib

    for block in _TOML_BLOCK.findall(doc.read_text()):
        tomllib.loads(block)
