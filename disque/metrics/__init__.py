"""HTTP metrics endpoint, dashboard and JSON API (docs/metrics.md)."""
