"""The Grafana dashboard and the Prometheus configuration of deploy/: valid JSON, provisioned by the compose
stack, and every panel's query names only metrics that engram's code exports.

No Grafana can be run here (no Docker engine, no Grafana package on the reachable registries), so the
dashboard is not render-checked; its PromQL is parsed instead.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client import Counter, Histogram, Summary

import engram.workers.metrics as metrics

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "engram.json"

PROMQL_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "and",
    "or",
    "unless",
    "inf",
    "nan",
}


def exported_names(redis_url: str) -> set[str]:
    """Every sample name the code exports: the metrics of workers.metrics (counters as ``_total``, histograms
    as ``_bucket``/``_count``/``_sum``) and the families its collectors yield (queue depths read from a real
    Redis at ``redis_url``)."""
    names: set[str] = set()
    for obj in vars(metrics).values():
        if isinstance(obj, Counter):
            names.add(f"{obj._name}_total")
        elif isinstance(obj, Histogram | Summary):
            names |= {f"{obj._name}_{suffix}" for suffix in ("bucket", "count", "sum")}
    families = [
        *metrics.WorkerResourcesCollector().collect(),
        *metrics.QueueDepthCollector(redis_url, ["ingest", "store"]).collect(),
    ]
    names |= {s.name for f in families for s in f.samples}
    return names


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers left after removing string literals, label
    matchers, ranges, ``by``/``without`` label lists, numbers and function calls."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"(?<![\w.])\d+(\.\d+)?([eE][-+]?\d+)?", "", expr)  # numbers, 1e-9 included
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr):
        following = expr[m.end() :].lstrip()[:1]
        if following == "(" or m.group(0).lower() in PROMQL_KEYWORDS:
            continue
        names.add(m.group(0))
    return names


def test_metric_name_parser():
    expr = (
        "histogram_quantile(0.95, sum by (le, stage) (rate(engram_stage_duration_seconds_bucket"
        '{stage="store"}[5m]))) / clamp_min(sum(rate(x_total[1m])), 1e-9)'
    )
    assert metric_names(expr) == {"engram_stage_duration_seconds_bucket", "x_total"}


def test_dashboard_is_valid_and_every_query_names_an_exported_metric(redis_server):
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["title"] and dash["panels"]
    exported = exported_names(redis_server)
    assert {"engram_queue_depth", "engram_queue_unacked", "engram_worker_cpu_seconds_total"} <= exported
    titles = []
    for panel in dash["panels"]:
        titles.append(panel["title"].lower())
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            assert names, target["expr"]
            assert names <= exported, (panel["title"], names - exported)
    # what the operations issue asks the dashboard to show
    for needed in (
        "by kind",
        "stage",
        "queue depth",
        "publish to searchable",
        "reason",
        "cpu",
        "memory",
        "search latency",
    ):
        assert any(needed in t for t in titles), needed
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))


def test_compose_provisions_the_dashboard_and_scrapes_api_and_workers():
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    grafana_volumes = compose["services"]["grafana"]["volumes"]
    mount = next(v for v in grafana_volumes if v.startswith("./grafana/dashboards:"))
    provider = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "dashboards" / "engram.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == mount.split(":")[1]
    datasource = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text())
    assert datasource["datasources"][0]["type"] == "prometheus"

    prom = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in prom["scrape_configs"]}
    assert jobs["engram-api"]["static_configs"][0]["targets"] == ["api:8000"]
    port = int(compose["x-engram-env"]["ENGRAM_METRICS_PORT"])
    sd = jobs["engram-worker"]["dns_sd_configs"][0]
    assert sd["port"] == port and {"worker-cpu", "worker-store"} <= set(sd["names"])
    assert {"worker-cpu", "worker-store", "worker-gpu"} <= set(compose["services"])
