"""The server's Prometheus metrics, through prometheus-client (its text format, its counters and
histograms: nothing of that format is written by hand here). One registry per app, so apps in one
process (tests) do not share counts."""
from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# seconds: a first token takes milliseconds on a warm small model, seconds behind a queue
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ServerMetrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        self.requests = Counter("pypowerinfer_requests_total", "Requests answered, by endpoint and status",
                                ["endpoint", "status"], registry=self.registry)
        self.tokens = Counter("pypowerinfer_generated_tokens_total",
                              "Tokens generated (rate() of it is the server's tokens per second)", registry=self.registry)
        self.queue = Gauge("pypowerinfer_queue_depth", "Requests waiting for the model", registry=self.registry)
        self.busy = Gauge("pypowerinfer_busy_slots", "Requests the model is computing now", registry=self.registry)
        self.ttft = Histogram("pypowerinfer_time_to_first_token_seconds",
                              "From a streamed request's arrival to its first token", buckets=TTFT_BUCKETS,
                              registry=self.registry)
        self.decode_rate = Gauge("pypowerinfer_last_request_tokens_per_second",
                                 "Tokens after the first per second, of the last finished stream", registry=self.registry)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
