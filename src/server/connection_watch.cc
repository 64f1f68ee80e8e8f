#include "server/connection_watch.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

namespace gb::server {

ConnectionWatch::State ConnectionWatch::state() const {
  // HttpTransport closes the socket only after the handler returns, so fd_ cannot be reused.
  if (fd_ < 0) return State::kOpen;
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return State::kOpen;
  if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return State::kGone;  // reset, or both directions shut
  if (p.revents & POLLRDHUP) return State::kHalfClosed;
  char c;
  const ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return State::kOpen;  // a pipelined request waiting: the client is still there
  if (n == 0) return State::kHalfClosed;
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? State::kOpen : State::kGone;
}

bool ConnectionWatch::write_raw(std::string_view bytes) const {
  if (fd_ < 0) return true;
  const ssize_t n = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  return n == static_cast<ssize_t>(bytes.size()) || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
}

}  // namespace gb::server
