// The HTTP test fixture: a Server on an ephemeral port over a FakeEngine, with clients, SSE
// helpers and captured request logs. Shared by http_test.cc and glass_http_test.cc.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/fakes.h"
#include "server/server.h"

namespace gb::server {

using json = nlohmann::json;
using namespace std::chrono_literals;

inline constexpr const char* kUserKey = "sk-user-123";
inline constexpr const char* kAdminKey = "sk-admin-456";
inline constexpr const char* kLimitedKey = "sk-limited-789";
inline constexpr int32_t kContext = 256;

inline ServerConfig test_config() {
  ServerConfig cfg;
  cfg.model = "/models/tiny";
  cfg.served_model_name = "tiny";
  cfg.host = "127.0.0.1";
  cfg.port = 0;
  cfg.http_threads = 8;
  cfg.max_concurrent_requests = 4;
  cfg.max_queue_length = 10;
  cfg.max_body_bytes = 8192;
  cfg.read_timeout_s = 2;
  cfg.write_timeout_s = 2;
  cfg.keys = {{"alice", kUserKey, "", Role::kUser, -1}, {"lim", kLimitedKey, "", Role::kUser, 60}};
  cfg.rate_limit_burst = 2;
  cfg.api_key = kAdminKey;
  return cfg;
}

// Splits an SSE body into its data payloads.
inline std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end;
  }
  return out;
}

// A raw TCP client for what httplib's client will not do (slow headers, half-close, bodies that
// never end).
class RawConn {
 public:
  explicit RawConn(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~RawConn() {
    if (fd_ >= 0) close(fd_);
  }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;
  bool connected() const { return connected_; }
  int fd() const { return fd_; }
  // false once the server has closed or reset the connection.
  bool send_all(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }
  // Reads until the server closes, `until` appears, or the timeout passes.
  std::string read_until(const std::string& until, std::chrono::milliseconds timeout) {
    std::string out;
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      if (!until.empty() && out.find(until) != std::string::npos) break;
      pollfd p{fd_, POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (poll(&p, 1, static_cast<int>(std::max<int64_t>(1, left.count()))) <= 0) continue;
      char buf[16384];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

class HttpTest : public ::testing::Test {
 protected:
  void start(ServerConfig cfg = test_config(), test::FakeEngineOptions opts = {}, bool ready = true) {
    engine_ = std::make_unique<test::FakeEngine>(opts);
    server_ = std::make_unique<Server>(cfg, [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(logs_mutex_);
      logs_.push_back(line);
    });
    ASSERT_TRUE(server_->start().is_ok());
    if (!ready) return;
    make_ready();
  }
  void make_ready() {
    server_->attach(engine_.get(), &codec_, kContext);
    ASSERT_TRUE(server_->self_test(2000ms).is_ok());
    server_->set_ready();
  }
  void TearDown() override {
    if (server_) server_->stop();
    server_.reset();
    engine_.reset();
  }
  std::unique_ptr<httplib::Client> client() {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    c->set_read_timeout(10, 0);
    return c;
  }
  httplib::Headers auth(const char* key = kUserKey) { return {{"Authorization", std::string("Bearer ") + key}}; }
  httplib::Result post(const std::string& path, const json& body, const char* key = kUserKey) {
    return client()->Post(path.c_str(), auth(key), body.dump(), "application/json");
  }
  // A streaming POST whose body is read chunk by chunk; stop_after > 0 disconnects after that
  // many chunks.
  std::string post_stream(const std::string& path, const json& body, int stop_after = 0, int* status = nullptr) {
    std::string received;
    int chunks = 0;
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.headers = auth();
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      received.append(data, n);
      return stop_after == 0 || ++chunks < stop_after;
    };
    auto c = client();
    auto res = c->send(req);
    if (status != nullptr) *status = res ? res->status : -1;
    return received;
  }
  void expect_error(const httplib::Result& res, int status, const std::string& type, const std::string& message_part) {
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, status) << res->body;
    EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
    json body = json::parse(res->body);
    EXPECT_EQ(body["error"]["type"], type) << res->body;
    EXPECT_NE(body["error"]["message"].get<std::string>().find(message_part), std::string::npos) << res->body;
  }
  std::vector<std::string> logs() {
    std::lock_guard<std::mutex> lock(logs_mutex_);
    return logs_;
  }
  bool wait_idle(std::chrono::milliseconds timeout = 3000ms) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (server_->in_flight() > 0 && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(5ms);
    return server_->in_flight() == 0;
  }

  test::FakeCodec codec_;
  std::unique_ptr<test::FakeEngine> engine_;
  std::unique_ptr<Server> server_;
  std::mutex logs_mutex_;
  std::vector<std::string> logs_;
};

}  // namespace gb::server
