// What `glassbox serve` serves, built from its config: the model with its weight variants, the
// engine and the text codec (tokenizer + chat template). `glassbox eval` serves the same in process.
#pragma once

#include "core/status.h"
#include "server/config.h"
#include "server/lifecycle.h"

namespace gb::cli {

Result<server::Backend> make_backend(const server::ServerConfig& cfg);

}  // namespace gb::cli
