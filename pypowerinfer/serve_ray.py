"""Replicas of the OpenAI-compatible server behind Ray Serve (`pip install "pypowerinfer[ray]"`).

Ray Serve does the rest: HTTP proxies on each node, routing to the replicas, autoscaling on
ongoing requests and placement across a Ray cluster. Each replica is pypowerinfer.server's app
over its own model, so its routes, errors, /health and /metrics are the single server's.

From Python:

    from ray import serve
    from pypowerinfer.serve_ray import deployment
    serve.run(deployment("model.gguf", num_replicas=2).bind())     # http://127.0.0.1:8000/v1

From the command line (the deployment config: model path and Llama options):

    serve run pypowerinfer.serve_ray:build_app model_path=model.gguf n_ctx=4096 max_replicas=4

On a cluster, `ray start --head` on one machine and `ray start --address=HEAD:6379` on the
others, then the same `serve run` (or a Serve config file naming `pypowerinfer.serve_ray:build_app`)
spreads the replicas over them; every node's proxy answers on its port 8000.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Optional

# build_app's arguments that configure the deployment rather than the model
_DEPLOYMENT_KEYS = ("num_replicas", "min_replicas", "max_replicas", "threads_per_replica", "model_name", "max_queue",
                    "parallel")


def deployment(model_path: str, *, num_replicas: Optional[int] = None, min_replicas: int = 1,
               max_replicas: int = 4, threads_per_replica: int = 2, model_name: Optional[str] = None,
               max_queue: int = 64, parallel: int = 1, **llama_options: Any):
    """A Serve deployment of the server over `model_path`: num_replicas fixed, or (None)
    autoscaled between min_replicas and max_replicas on ongoing requests. Each replica reserves
    threads_per_replica CPUs, runs Llama(model_path, n_threads=threads_per_replica, **llama_options)
    and computes `parallel` requests at once (the server's --parallel: continuous batching, n_ctx
    shared). Autoscaling keeps about `parallel` ongoing requests per replica, its slots."""
    from ray import serve

    name = model_name or os.path.basename(model_path)
    options = {"n_threads": threads_per_replica, "n_threads_batch": threads_per_replica, "embedding": True,
               "verbose": False, **llama_options}

    def build_asgi():  # run on each replica when it starts
        from .llama import Llama
        from .server import create_app

        return create_app(Llama(model_path, **options), model_name=name, max_queue=max_queue, parallel=parallel)

    scaling: Dict[str, Any] = ({"num_replicas": num_replicas} if num_replicas is not None else
                               {"autoscaling_config": {"min_replicas": min_replicas, "max_replicas": max_replicas,
                                                       "target_ongoing_requests": parallel}})
    return serve.deployment(serve.ingress(build_asgi)(), name="pypowerinfer",
                            ray_actor_options={"num_cpus": threads_per_replica}, **scaling)


def _typed(value: Any) -> Any:
    """A `serve run ... key=value` string as the int, float or bool it spells, else itself (a
    Serve config file's values arrive typed already)."""
    if not isinstance(value, str):
        return value
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(value.lower(), value)


def build_app(args: Dict[str, str]):
    """The application builder `serve run pypowerinfer.serve_ray:build_app model_path=...` calls:
    model_path is required; the deployment keys and any Llama option may follow."""
    args = {k: _typed(v) for k, v in args.items()}
    if "model_path" not in args:
        raise ValueError("pypowerinfer.serve_ray:build_app needs model_path=PATH")
    model_path = str(args.pop("model_path"))
    deploy = {k: args.pop(k) for k in _DEPLOYMENT_KEYS if k in args}
    return deployment(model_path, **deploy, **args).bind()
