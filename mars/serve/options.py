"""``mars serve``'s own options, declared once (:class:`mars.declare.Option`).

The command line (``mars serve --help``, docs/cli.md), the dataclasses that carry the values
(:class:`~mars.serve.requests.Defaults`, :class:`~mars.serve.app.ServeOptions`,
:class:`~mars.serve.audit.AuditOptions`, :class:`~mars.serve.upstreams.Upstreams`) and their
checks read these declarations, so every default and range lives here. The options a question's
engine takes (``--spacing``, ``--max-tokens``, sampling, ``--concurrency``, ``--timeout``) are
the engine stages' (:mod:`mars.engines.options`, command ``serve``), and the method's knobs the
simulation settings (:mod:`mars.method.settings`). Imports nothing of the ``serve`` extra: the
command line declares its options before the extra is needed.
"""

from __future__ import annotations

from ..declare import Option, by_name
from ..method.audit import CONFIDENCE, DEFAULT_TARGET

#: which requests are MARS questions (``--mars-for``): ``n`` — n > 1 or a ``mars`` object;
#: ``object`` — only those with a ``mars`` object (plain n > 1 passes through)
MARS_FOR = ("n", "object")
#: where a question's requests go among the upstreams (``--routing``; the router's:
#: :class:`mars.serve.upstreams.Router`)
ROUTINGS = ("trace", "question", "load")
#: uvicorn's log levels (``--log-level``)
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
#: seconds an upstream request may take when ``--timeout`` is not given
UPSTREAM_TIMEOUT_S = 600.0

AUDIT = "Audit"

OPTIONS: tuple[Option, ...] = (
    Option("host", str, "address to listen on", default="127.0.0.1"),
    Option("port", int, "port to listen on", default=8000, low=1, high=65535),
    Option("model", str, "the upstream model to serve (default: the one the upstream serves)"),
    Option("served_model_name", str, "the name clients ask for (default: the upstream's)"),
    Option("traces", int, "default traces of a request without n (N)", default=64, low=1),
    Option(
        "max_traces",
        int,
        "traces a request may start at most: its n and its warmup",
        default=1024,
        low=1,
    ),
    Option(
        "mars_for",
        str,
        "which requests are questions: n (n > 1 or a mars object) or object (only a mars "
        "object; plain n > 1 passes through to the upstream)",
        default="n",
        choices=MARS_FOR,
    ),
    Option(
        "default_answer_format",
        str,
        "the answer format of a request that names none",
        default="boxed",
    ),
    Option("max_active", int, "requests solved at once (the others queue)", default=4, low=1),
    Option("max_queue", int, "requests that may wait; more are answered 429", default=64, low=0),
    Option(
        "api_key_env",
        str,
        "environment variable holding the key clients must send (unset or empty: none)",
        default="MARS_SERVE_API_KEY",
    ),
    Option(
        "upstream_key_env",
        str,
        "environment variable holding the upstreams' API key",
        default="MARS_API_KEY",
    ),
    Option(
        "retries",
        int,
        "further tries of an upstream request before failover",
        default=2,
        low=0,
    ),
    Option(
        "tokenizer",
        str,
        "the model's tokenizer: 'server' (the upstream's /tokenize), a tokenizer folder, "
        "tokenizer.json or GGUF file (default: what the upstream reports)",
    ),
    Option(
        "routing",
        str,
        "where a question's requests go among the upstreams: trace (each trace stays on the "
        "replica holding its prefix, a question's traces spread over them), question (a "
        "question's traces on one replica), load (each request to the least loaded)",
        default="trace",
        choices=ROUTINGS,
    ),
    Option(
        "affinity_header",
        str,
        "send each trace's key in this HTTP header with every request of the trace (for a "
        "router of your own in front of the replicas: llm-d, Dynamo, ...)",
    ),
    Option(
        "log_level",
        str,
        "log level: the proxy's lines (one per question answered) and uvicorn's",
        default="info",
        choices=LOG_LEVELS,
    ),
    Option(
        "engine_watch",
        bool,
        "after a stop, read the upstream's own /metrics until its running count falls "
        "(mars_serve_engine_drain_seconds; llama-server needs --metrics)",
        default=True,
    ),
    Option(
        "audit_rate",
        float,
        "share of MARS questions audited after their answer: their stopped traces run to their "
        "end and the full-budget vote compared with the answer served (0: only those whose "
        "request says mars.audit: true)",
        default=0.0,
        low=0,
        high=1,
        panel=AUDIT,
    ),
    Option(
        "audit_seed", int, "seed of the audit's pick of questions", default=0, low=0, panel=AUDIT
    ),
    Option(
        "audit_concurrency",
        int,
        "audits running at once (an audit never waits: one picked without room is dropped)",
        default=1,
        low=1,
        panel=AUDIT,
    ),
    Option(
        "audit_confidence",
        float,
        "confidence of the audit's one-sided Clopper-Pearson bounds",
        default=CONFIDENCE,
        low=0,
        high=1,
        low_open=True,
        high_open=True,
        panel=AUDIT,
    ),
    Option(
        "audit_target",
        float,
        "the risk an audited method is held to when it promises none of its own (MARS2: its "
        "risk_alpha; the certified rule: its delta)",
        default=DEFAULT_TARGET,
        low=0,
        high=1,
        low_open=True,
        high_open=True,
        panel=AUDIT,
    ),
)
SERVE: dict[str, Option] = by_name(OPTIONS)
