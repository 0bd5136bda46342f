"""What operators see: log lines, Prometheus metrics, the per-minute counts."""
