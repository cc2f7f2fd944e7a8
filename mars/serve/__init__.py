"""``mars serve``: MARS behind an OpenAI-compatible endpoint, in front of the servers a team runs.

One request is one question: its N parallel traces run on the upstream servers, are probed at every
checkpoint and stopped there the moment the method fires, and the answer comes back as a normal
completion with a ``mars`` object saying how it was reached. The stages, one module each, data
flowing down the list:

* :mod:`~mars.serve.bodies` — the request bodies, typed (pydantic), a refusal said in one line;
* :mod:`~mars.serve.requests` — a typed body read into a checked question;
* :mod:`~mars.serve.upstreams` — the upstream replicas, the router that shares them;
* :mod:`~mars.serve.schedule` — the bounded, fair queue of requests;
* :mod:`~mars.serve.solve` — one question through the live loop (:func:`mars.live.solve`);
* :mod:`~mars.serve.record` — every served question appended to a pool;
* :mod:`~mars.serve.audit` — a seeded share of answered questions run on to their end, the
  full-budget vote compared with the answer: the promise checked where it is served;
* :mod:`~mars.serve.metrics`, :mod:`~mars.serve.responses` — Prometheus counters, OpenAI shapes
  (typed);
* :mod:`~mars.serve.app` — the HTTP routes (Starlette, run by uvicorn).

docs/serve.md is the user's guide. Needs the ``serve`` extra (starlette, uvicorn, httpx,
prometheus-client, pydantic); ``import mars`` never imports this package.
"""
