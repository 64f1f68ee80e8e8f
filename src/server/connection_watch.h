// ConnectionWatch: tells a handler whose client has gone away before it answers. cpp-httplib
// 0.11 (Debian bookworm) gives a handler no access to its socket and no "connection closed"
// query (newer versions have Request::is_connection_closed), so a non-streaming request would
// otherwise keep generating for a client that left. The watch finds the handler's socket once
// by its address pair (local and remote address:port identify a TCP connection uniquely) and
// then peeks at it: an orderly close (recv = 0) or a reset means the client is gone.
#pragma once

#include <string>

namespace gb::server {

class ConnectionWatch {
 public:
  // Looks up the connected socket with these endpoints among the process's descriptors.
  // If none is found (e.g. the address is not IPv4/IPv6), the watch reports "open" forever.
  ConnectionWatch(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port);

  // True once the peer has closed or reset the connection. Never blocks; never consumes data.
  bool closed();

  bool found() const { return fd_ >= 0; }

 private:
  std::string local_addr_, remote_addr_;
  int local_port_, remote_port_;
  int fd_ = -1;
};

}  // namespace gb::server
