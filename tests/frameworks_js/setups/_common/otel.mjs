// The OpenTelemetry JS SDK as an application sets it up: a NodeTracerProvider whose
// resource comes from the detectors NodeSDK runs by default (the environment:
// OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES; the host; the process), a
// batch span processor (OTEL_BSP_* settings) and the OTLP/HTTP (protobuf) exporter, which
// reads OTEL_EXPORTER_OTLP_ENDPOINT. The packages come from the set-up's own node_modules.
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { defaultResource, detectResources, envDetector, hostDetector, processDetector } from '@opentelemetry/resources';

/** Register a tracer provider exporting over OTLP; returns it (call `shutdown()` at the end).
 * `makeProcessor(exporter)` makes its span processor (default: the SDK's batch processor). */
export function startTracing(makeProcessor = exporter => new BatchSpanProcessor(exporter)) {
  const resource = defaultResource().merge(detectResources({ detectors: [envDetector, hostDetector, processDetector] }));
  const provider = new NodeTracerProvider({
    resource,
    spanProcessors: [makeProcessor(new OTLPTraceExporter())],
  });
  provider.register();
  return provider;
}
