// The OpenTelemetry JS SDK as an application sets it up: a NodeTracerProvider whose
// resource comes from the environment (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES), a
// batch span processor and the OTLP/HTTP (protobuf) exporter, which reads
// OTEL_EXPORTER_OTLP_ENDPOINT. The packages come from the set-up's own node_modules.
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { defaultResource, detectResources, envDetector } from '@opentelemetry/resources';

/** Register a tracer provider exporting over OTLP; returns it (call `shutdown()` at the end). */
export function startTracing() {
  const resource = defaultResource().merge(detectResources({ detectors: [envDetector] }));
  const provider = new NodeTracerProvider({
    resource,
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter(), { scheduledDelayMillis: 200 })],
  });
  provider.register();
  return provider;
}
