// Linked into every fuzz target: undefined behaviour stops the run, so libFuzzer records it as a
// crash (with its input) instead of printing a line and going on.
extern "C" const char* __ubsan_default_options() { return "halt_on_error=1:print_stacktrace=1"; }
