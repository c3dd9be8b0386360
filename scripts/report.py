"""One self-contained page of every result: ``results/report.html``.

    python -m scripts.report          # (make report) offline, from the committed results

The page holds the claims table (``results/CLAIMS.md``), every study's table with the paper's
numbers beside ours, the command and commit that produced each result, and every figure of
``results/figures/`` embedded (PNG as data; the vector files, SVG, are linked beside them). It
opens offline in any browser; links point only at files in ``results/``.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from urllib.parse import quote

RESULTS = Path("results")
OUT = RESULTS / "report.html"
FIGURES = RESULTS / "figures"
# (title, results folder, figure name prefixes)
SECTIONS = [
    ("BN paper Figure 1: MNIST", "mnist/mnist", ("mnist_",)),
    ("BN paper Figure 1 on Fashion-MNIST", "mnist/fashion_mnist", ("fashion_mnist_",)),
    ("Batch Renorm paper Figs. 1-2 (Fashion-MNIST)", "renorm/fashion_mnist", ("renorm_",)),
    ("Batch Renorm paper Figs. 1-2 (MNIST)", "renorm/mnist", ()),
    (
        "BN paper Figs. 2-3: BN-Inception, reduced setting, the paper's converged protocol",
        "inception/fashion_mnist_converged",
        ("inception_fig2_fashion_mnist_converged",),
    ),
    (
        "BN paper Figs. 2-3: BN-Inception, reduced setting, a fixed budget of 3,000 steps",
        "inception/fashion_mnist_cpu",
        ("inception_",),
    ),
]
STUDY_TABLES = ("fig3_table.md",)  # a study's own Markdown table, shown when its folder has one
STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 12px; }
th, td { border: 1px solid #ccc; padding: 3px 6px; vertical-align: top; }
th { background: #f3f3f3; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; } figcaption { font-size: 12px; color: #555; }
code { background: #f3f3f3; padding: 0 3px; } details { margin: 0.5em 0; }
"""


def markdown_table(text: str, source: str = "CLAIMS.md") -> str:
    """The first Markdown table in ``text`` (read from ``source``) as HTML."""
    rows = [
        line.strip().strip("|").split(" | ") for line in text.splitlines() if line.startswith("|")
    ]
    if not rows:
        raise SystemExit(f"error: {source} holds no table to show (make claims rebuilds CLAIMS.md)")
    head, body = rows[0], [r for r in rows[2:]]
    cell = lambda c: html.escape(c.strip()).replace("**", "")  # noqa: E731
    out = ["<table><tr>" + "".join(f"<th>{cell(c)}</th>" for c in head) + "</tr>"]
    out += ["<tr>" + "".join(f"<td>{cell(c)}</td>" for c in r) + "</tr>" for r in body]
    return "\n".join(out) + "</table>"


def setups_table(summary: dict) -> str:
    """Per setup: every seed statistic (mean ± spread) and the paper's number when it has one."""
    setups = summary.get("setups", {})
    keys = sorted(
        {k for e in setups.values() for k, v in e.items() if isinstance(v, dict) and "mean" in v}
    )
    paper = summary.get("paper", {}).get("setups", {})
    head = ["setup", "seeds", *keys, "paper"]
    rows = []
    for name, e in setups.items():
        stats = [f"{e[k]['mean']:.4g} ± {e[k]['std']:.2g}" if k in e else "–" for k in keys]
        rows.append(
            [
                name,
                str(len(e.get("seeds", []))),
                *stats,
                json.dumps(paper.get(name, "")) if name in paper else "–",
            ]
        )
    out = ["<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    out += ["<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows]
    return "\n".join(out) + "</table>"


def figure(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    svg = path.with_suffix(".svg")
    name, svg_name = html.escape(path.name), html.escape(svg.name)
    link = (
        f' (vector: <a href="figures/{html.escape(quote(svg.name))}">{svg_name}</a>)'
        if svg.exists()
        else ""
    )
    return (
        f'<figure><img alt="{name}" src="data:image/png;base64,{data}">'
        f"<figcaption>{name}{link}</figcaption></figure>"
    )


def section(title: str, folder: str, figures: list[Path]) -> str:
    parts = [f"<h2>{html.escape(title)}</h2>"]
    summary_path = RESULTS / folder / "summary.json"
    if summary_path.exists():
        try:
            s = json.loads(summary_path.read_text())
        except ValueError as e:
            raise SystemExit(
                f"error: {summary_path} is not valid JSON ({e}): collect it again"
            ) from None
        parts.append(
            f"<p>Command: <code>{html.escape(str(s.get('command') or '–'))}</code>; commit "
            f"<code>{html.escape(str(s.get('git_commit')))}</code>; wall time "
            f"{html.escape(str(s.get('wall_time_s') or '–'))} s. Files: "
            f'<a href="{html.escape(quote(folder))}/runs.csv">runs.csv</a>, '
            f'<a href="{html.escape(quote(folder))}/summary.json">summary.json</a>.</p>'
        )
        for name in STUDY_TABLES:
            if (RESULTS / folder / name).exists():
                text = (RESULTS / folder / name).read_text()
                parts.append(f"<p>{html.escape(text.split(chr(10))[0])}</p>")
                parts.append(markdown_table(text, str(RESULTS / folder / name)))
        parts.append(setups_table(s))
        if s.get("paper"):
            parts.append(
                "<details><summary>the paper's numbers, as stored</summary><pre>"
                + html.escape(json.dumps(s["paper"], indent=2))
                + "</pre></details>"
            )
    parts += [figure(p) for p in figures]
    return "\n".join(parts)


def render() -> str:
    pngs = sorted(FIGURES.glob("*.png"))
    placed: set[Path] = set()
    sections = []
    for title, folder, prefixes in SECTIONS:
        mine = [p for p in pngs if p.name.startswith(prefixes) and p not in placed]
        placed.update(mine)
        sections.append(section(title, folder, mine))
    rest = [p for p in pngs if p not in placed]
    if rest:
        sections.append("<h2>Other figures</h2>\n" + "\n".join(figure(p) for p in rest))
    claims = (RESULTS / "CLAIMS.md").read_text() if (RESULTS / "CLAIMS.md").exists() else ""
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        "<title>BN and Batch Renorm: results</title>"
        f"<style>{STYLE}</style></head><body>\n"
        "<h1>Batch Normalization and Batch Renormalization: a reproduction</h1>\n"
        "<p>Every number comes from a committed CSV in <code>results/</code>; "
        "<code>make claims report</code> rebuilds this page offline. "
        'Settings and discussion: <a href="README.md">results/README.md</a>.</p>\n'
        "<h2>Claims</h2>\n"
        + (markdown_table(claims) if claims else "<p>no claims table yet</p>")
        + "\n"
        + "\n".join(sections)
        + "\n</body></html>\n"
    )


def main() -> None:
    OUT.write_text(render())
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
