"""contrib/grafana-jobgate.json (docs/metrics.md, "Grafana"): valid JSON, a dashboard Grafana
imports (panels with unique ids, targets with PromQL), and every metric name its PromQL
expressions and template variables use is a series of a real `/metrics` scrape (a real
server on a manual clock after a beanstalk put / reserve / delete)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import greenstalk
import httpx
from prometheus_client.parser import text_string_to_metric_families

from .inproc import InProcServer
from .support import ROOT

DASHBOARD = Path(ROOT) / "contrib" / "grafana-jobgate.json"

#: PromQL words that are not metric names (aggregations, modifiers)
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool",
             "and", "or", "unless", "sum", "min", "max", "avg", "count", "inf", "nan"}


def metric_names(expr: str) -> set:
    """The metric names in PromQL `expr`: identifiers that are not functions (followed by
    `(`), keywords, label matchers (`{...}`), grouping labels (`by (...)`), ranges (`[...]`),
    strings or numbers."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)            # strings
    e = re.sub(r"\{[^}]*\}", " ", e)                      # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)                     # ranges
    e = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", " ", e)   # grouping labels
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        word, rest = m.group(0), e[m.end():].lstrip()
        if rest.startswith("(") or word.lower() in _KEYWORDS:
            continue
        names.add(word)
    return names


def exprs(dash: dict) -> list:
    out = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"]
            out.append(re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", q))
    return out


def test_dashboard_is_valid_json_grafana_imports():
    dash = json.loads(DASHBOARD.read_text())
    assert dash["title"] and dash["uid"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for p in dash["panels"]:
        assert p["type"] in ("timeseries", "stat") and p["targets"], p["title"]
        assert set(p["gridPos"]) == {"x", "y", "w", "h"}
    assert {"datasource", "instance", "queue"} <= {v["name"]
                                                 for v in dash["templating"]["list"]}


def test_metric_names_helper():
    assert metric_names('histogram_quantile(0.99, sum by (le, queue) '
                        '(rate(jobgate_run_seconds_bucket{queue=~"$q"}[5m])))') \
        == {"jobgate_run_seconds_bucket"}
    assert metric_names("sum(rate(a_sum[1m])) / sum(rate(b_count[1m]))") == {"a_sum", "b_count"}


def test_every_metric_name_exists_in_a_real_scrape(tmp_path):
    s = InProcServer(f"sqlite:///{tmp_path / 'j.db'}", dialects=("beanstalk", "http"))
    try:
        with greenstalk.Client(("127.0.0.1", s.ports["beanstalk"]), use="g", watch="g") as c:
            c.put("x")
            s.advance(10)
            c.delete(c.reserve())
        text = httpx.get(f"http://127.0.0.1:{s.ports['http']}/metrics", timeout=10).text
    finally:
        s.stop()
    scraped = {smp.name for fam in text_string_to_metric_families(text) for smp in fam.samples}
    used = set()
    for e in exprs(json.loads(DASHBOARD.read_text())):
        used |= metric_names(e)
    assert used, "the dashboard queries nothing"
    assert {n for n in used if n.startswith("jobgate_")} == used
    assert used <= scraped, sorted(used - scraped)
