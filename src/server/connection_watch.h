// ConnectionWatch: tells a handler whose client has gone away before it answers (a non-streaming
// request would otherwise keep generating for nobody). It watches the handler's socket (from
// HttpTransport's ConnectionContext) without reading from it. A FIN alone does not mean the client
// left: HTTP allows a client to half-close after its request and still read the answer. So a FIN
// is kHalfClosed, and the handler probes (a 1xx interim response, or an SSE comment): a client
// that closed entirely answers the probe with a reset, which is kGone.
#pragma once

#include <string_view>

namespace gb::server {

class ConnectionWatch {
 public:
  enum class State { kOpen, kHalfClosed, kGone };

  // fd < 0: reports kOpen forever.
  explicit ConnectionWatch(int fd) : fd_(fd) {}

  // Never blocks; never consumes data.
  State state() const;
  // Writes bytes straight to the socket, non-blocking; false if the socket refused them (the
  // client is gone). Only between HTTP messages (before the answer's status line) or through the
  // response's own framing.
  bool write_raw(std::string_view bytes) const;

 private:
  int fd_ = -1;
};

}  // namespace gb::server
