// The glass box (src/glass, gb_glass): per-request observation and interventions inside the
// continuous batch, and the engine-wide massive-activation monitor, as data the forward pass
// applies at its hook points (the model's StepTable), never user callbacks.
//
//   spec.h           GlassSpec and its parts; resolution against the model; is_massive()
//   report.h         what a request gets back (GlassReport)
//   accumulator.h    GlassAccumulator: one sequence's observation, storage on first use
//   step.h           GlassStep: one step's table (StepTable); the monitor's types
//   control_vector.h llama.cpp / repeng control vectors → add interventions
//   limits.h         caps, allowed layers and points, the combined-effect check
//   codec.h          the `glassbox` JSON request syntax ↔ specs, reports → JSON
//   repetition.h     the n-gram repetition stop
//
// The engine includes this header; the server uses the codec and the limits.
#pragma once

#include "glass/accumulator.h"
#include "glass/report.h"
#include "glass/spec.h"
#include "glass/step.h"
