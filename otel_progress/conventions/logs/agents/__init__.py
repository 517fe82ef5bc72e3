"""One module per coding agent whose OTLP log events otel-progress reads (see
:mod:`otel_progress.conventions.logs`)."""
