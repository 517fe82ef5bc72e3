"""OTLP in and out, as files and messages: no engine logic.

* :mod:`.files`: reading OTLP/JSON trace files (the Collector file exporter's lines, a
  document, gzip) into span records.
* :mod:`.logs_json` and :mod:`.logs_proto`: OTLP log requests (JSON and protobuf) to the
  log-record views the coding-agent conventions read.
* :mod:`.exporter`: an SDK span exporter that writes OTLP/JSON lines (used by ``demo``).
"""
