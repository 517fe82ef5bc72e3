# Honeycomb triggers for otel-progress detections (honeycombio Terraform provider).
#
#   export HONEYCOMB_API_KEY=<configuration key with "Manage Queries and Columns" + "Manage Triggers">
#   terraform init && terraform apply -var dataset=<dataset slug> -var alert_email=<you@example.com>
#
# The sink (sink.yaml + sink-backends.yaml) sends traces and detection log records to Honeycomb with the
# ingest key in HONEYCOMB_API_KEY; the dataset is the service.name of the agents
# (Honeycomb environments put each service in its own dataset).  Use
# dataset = "__all__" for an environment-wide trigger.
#
# The same four triggers as plain API bodies: trigger-*.json in this folder.

terraform {
  required_providers {
    honeycombio = {
      source  = "honeycombio/honeycombio"
      version = "~> 0.51"
    }
  }
}

provider "honeycombio" {
  # reads HONEYCOMB_API_KEY (and HONEYCOMB_API_ENDPOINT for the EU region)
}

variable "dataset" {
  type        = string
  description = "Dataset slug of the agent service, or __all__"
}

variable "alert_email" {
  type        = string
  description = "Where the triggers send notifications"
}

# --- spans flagged by otel-progress (span attribute, no span-event join needed)
data "honeycombio_query_specification" "detected_spans" {
  calculation {
    op = "COUNT"
  }

  filter {
    column = "progress.detected"
    op     = "="
    value  = "true"
  }

  breakdowns = ["service.name", "gen_ai.agent.name", "progress.reason"]
  time_range = 600
}

resource "honeycombio_trigger" "detected_spans" {
  name        = "otel-progress: agent stopped making progress"
  description = "Spans with progress.detected = true in the last 10 minutes, by service, agent and reason."
  dataset     = var.dataset
  query_json  = data.honeycombio_query_specification.detected_spans.json
  frequency   = 300
  alert_type  = "on_change"

  threshold {
    op    = ">"
    value = 0
  }

  recipient {
    type   = "email"
    target = var.alert_email
  }
}

# --- level 3: park
data "honeycombio_query_specification" "parked" {
  calculation {
    op = "COUNT"
  }

  filter {
    column = "progress.detected"
    op     = "="
    value  = "true"
  }

  filter {
    column = "progress.level"
    op     = ">="
    value  = "3"
  }

  filter_combination = "AND"
  breakdowns         = ["service.name", "gen_ai.agent.name", "progress.reason"]
  time_range         = 300
}

resource "honeycombio_trigger" "parked" {
  name        = "otel-progress: agent parked (level 3)"
  description = "Level-3 detections: the agent/run was asked to stop after nudging and restarting did not help."
  dataset     = var.dataset
  query_json  = data.honeycombio_query_specification.parked.json
  frequency   = 120
  alert_type  = "on_true"

  threshold {
    op    = ">"
    value = 0
  }

  recipient {
    type   = "email"
    target = var.alert_email
  }
}

# --- the span events themselves (one Honeycomb row per OTLP span event)
data "honeycombio_query_specification" "no_progress_events" {
  calculation {
    op = "COUNT"
  }

  filter {
    column = "meta.annotation_type"
    op     = "="
    value  = "span_event"
  }

  filter {
    column = "name"
    op     = "="
    value  = "no_progress"
  }

  filter_combination = "AND"
  breakdowns         = ["service.name", "progress.reason", "progress.level"]
  time_range         = 600
}

resource "honeycombio_trigger" "no_progress_events" {
  name        = "otel-progress: no_progress span events"
  description = "no_progress span events by service and reason (copy with name = livelock for livelocks)."
  dataset     = var.dataset
  query_json  = data.honeycombio_query_specification.no_progress_events.json
  frequency   = 300
  alert_type  = "on_change"

  threshold {
    op    = ">"
    value = 0
  }

  recipient {
    type   = "email"
    target = var.alert_email
  }
}

# --- the detections as log records (gen_ai.evaluation.result, one row per detection)
data "honeycombio_query_specification" "evaluation_results" {
  calculation {
    op = "COUNT"
  }

  filter {
    column = "gen_ai.evaluation.name"
    op     = "starts-with"
    value  = "progress."
  }

  breakdowns = ["service.name", "progress.reason", "progress.level"]
  time_range = 600
}

resource "honeycombio_trigger" "evaluation_results" {
  name        = "otel-progress: detections (gen_ai.evaluation.result log records)"
  description = "The detection log records otel-progress writes in the span's context, by service, reason and level."
  dataset     = var.dataset
  query_json  = data.honeycombio_query_specification.evaluation_results.json
  frequency   = 300
  alert_type  = "on_change"

  threshold {
    op    = ">"
    value = 0
  }

  recipient {
    type   = "email"
    target = var.alert_email
  }
}
