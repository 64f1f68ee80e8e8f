// The server under hostile or odd clients, over real sockets against the FakeEngine: deep JSON,
// bodies that never end or are huge, slow and idle connections, half-closed clients, a second
// server on the same port, bodiless POSTs, invalid UTF-8, long token-id prompts, bounded error
// messages, the model path, and typed engine errors.
#include <sys/resource.h>

#include <atomic>
#include <future>
#include <thread>

#include "server/http_fixture.h"
#include "support/test_support.h"
#ifndef GB_BASE_CHECK  // defined only to run these tests against the code before the fixes
#include "server/json_input.h"
#endif

namespace gb::server {
namespace {

int64_t rss_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (f != nullptr) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);
}

// {"prompt": "x", "max_tokens": 1, "glassbox": {"observe": {"stats": [[[...]]]}}} with `depth`
// nested arrays inside stats.
std::string deep_body(int depth, const char* prefix = R"({"prompt":"x","max_tokens":1,"glassbox":{"observe":{"stats":)",
                      const char* suffix = "}}}") {
  return std::string(prefix) + std::string(static_cast<size_t>(depth), '[') +
         std::string(static_cast<size_t>(depth), ']') + suffix;
}

std::string http_request(const std::string& method, const std::string& path, const std::string& body,
                         const char* key = kUserKey, const std::string& extra_headers = "") {
  std::string r = method + " " + path + " HTTP/1.1\r\nHost: x\r\n";
  if (key != nullptr) r += std::string("Authorization: Bearer ") + key + "\r\n";
  r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + extra_headers +
       "\r\n" + body;
  return r;
}

int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0 || response.size() < 12) return -1;
  return std::atoi(response.substr(9, 3).c_str());
}

class HardeningTest : public HttpTest {
 protected:
  ServerConfig big_body_config() {
    ServerConfig cfg = test_config();
    cfg.max_body_bytes = 4 << 20;
    cfg.rate_limit_burst = 1000;
    return cfg;
  }
  void expect_alive() {
    auto c = client();
    auto h = c->Get("/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
    auto res = post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}});
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
  }
};

// Issue 11.1: 100,000 nested arrays (~200 KB) inside `glassbox` crashed the server (a recursive
// walk of the parsed value overflowed the stack); the admin PUTs the same.
TEST_F(HardeningTest, DeeplyNestedJsonIsRefusedAndTheServerLives) {
  start(big_body_config());
  const std::string deep = deep_body(100000);
  ASSERT_GT(deep.size(), 200000u);
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    auto res = client()->Post(path, auth(), deep, "application/json");
    ASSERT_TRUE(res) << path;
    expect_error(res, 400, "invalid_request_error", "deeper than 64 levels");
    EXPECT_LT(res->body.size(), 512u) << "the answer must not echo the body";
  }
  const std::string admin_deep = deep_body(100000, R"({"interventions":)", "}");
  for (const char* path : {"/admin/glassbox/policy", "/admin/glassbox/default", "/admin/glassbox/presets/p"}) {
    auto res = client()->Put(path, auth(kAdminKey), admin_deep, "application/json");
    ASSERT_TRUE(res) << path;
    expect_error(res, 400, "invalid_request_error", "deeper than 64 levels");
  }
  expect_alive();
}

#ifndef GB_BASE_CHECK
TEST(JsonInput, NestingLimitIsExactly64) {
  json out;
  auto nested = [](int depth) {
    return std::string(static_cast<size_t>(depth), '[') + std::string(static_cast<size_t>(depth), ']');
  };
  EXPECT_FALSE(parse_json_body(nested(64), &out).has_value());
  ASSERT_TRUE(parse_json_body(nested(65), &out).has_value());
  EXPECT_NE(parse_json_body(nested(65), &out)->message.find("64"), std::string::npos);
  int64_t v = 0;
  EXPECT_FALSE(json_integer(json::parse("4294967299"), 0, 1 << 30, &v));  // 2^32 + 3 is not dim 3
  EXPECT_FALSE(json_integer(json::parse("18446744073709551615"), 0, 100, &v));
  EXPECT_FALSE(json_integer(json::parse("2.5"), 0, 100, &v));
  EXPECT_TRUE(json_integer(json::parse("7.0"), 0, 100, &v));
  EXPECT_EQ(v, 7);
  EXPECT_EQ(quote_input(std::string(500, 'a')).size(), 100u + 5u);  // 'aaa...'
  EXPECT_EQ(quote_input("\xff"), "'\xEF\xBF\xBD'");                 // replaced, valid UTF-8
  EXPECT_EQ(quote_input(std::string(99, 'a') + "\xC3\xA9"), "'" + std::string(99, 'a') + "...'");  // cut at a char
}
#endif

// Issue 11.2: a 50 MB invalid body was echoed back in the 400 (nlohmann's "last read" token).
TEST_F(HardeningTest, HugeInvalidBodyIsNotEchoed) {
  start(big_body_config());
  std::string body = R"({"prompt": ")" + std::string(3 << 20, 'A') + "\x01";  // a control char in a string
  auto res = client()->Post("/v1/completions", auth(), body, "application/json");
  ASSERT_TRUE(res);
  expect_error(res, 400, "invalid_request_error", "not valid JSON");
  EXPECT_LT(res->body.size(), 512u);
  EXPECT_EQ(res->body.find("AAAA"), std::string::npos);
}

// Issue 11.7: invalid UTF-8 inside a JSON string gave 500 (the 400's message quoted the bytes,
// and serializing it threw).
TEST_F(HardeningTest, InvalidUtf8IsA400) {
  start();
  for (const char* body : {"{\"prompt\": \"\xff\xfe\"}", "{\"model\": \"\xc3\", \"prompt\": \"x\"}"}) {
    auto res = client()->Post("/v1/completions", auth(), body, "application/json");
    ASSERT_TRUE(res);
    expect_error(res, 400, "invalid_request_error", "not valid JSON");
  }
  expect_alive();
}

// Found by server_request_fuzz and server_admin_fuzz: a number literal beyond a double (1e400)
// made the body parser throw out_of_range, answered 500 "internal error" (and the exception would
// have quoted the whole literal). It is a 400 that quotes nothing, on every route with a body.
TEST_F(HardeningTest, NumberBeyondADoubleIsA400) {
  start(big_body_config());
  const std::string digits(5000, '7');
  for (const std::string& number : {std::string("1e400"), std::string("-4444488e444488"), digits + "e" + digits}) {
    SCOPED_TRACE(number.substr(0, 20));
    const std::string body = R"({"prompt": "x", "max_tokens": 1, "temperature": )" + number + "}";
    for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
      auto res = client()->Post(path, auth(), body, "application/json");
      ASSERT_TRUE(res) << path;
      expect_error(res, 400, "invalid_request_error", "number too large");
      EXPECT_EQ(res->body.find("7777777777"), std::string::npos) << res->body.substr(0, 300);
    }
    auto res = client()->Put("/admin/glassbox/presets/p", auth(kAdminKey),
                             R"({"interventions": [{"op": "scale", "strength": )" + number + "}]}", "application/json");
    ASSERT_TRUE(res);
    expect_error(res, 400, "invalid_request_error", "number too large");
  }
  expect_alive();
}

// Found by server_request_fuzz: a content part's or response_format's "type" that is not a string
// threw from json::value(), answered 500. Both are a 400 naming the field.
TEST_F(HardeningTest, NonStringTypeFieldsAreA400) {
  start();
  for (const json& type : {json(true), json(5), json::array(), json::object(), json(nullptr)}) {
    SCOPED_TRACE(type.dump());
    json part = {{"type", type}, {"text", "hi"}};
    expect_error(post("/v1/chat/completions",
                      {{"messages", {{{"role", "user"}, {"content", json::array({part})}}}}, {"max_tokens", 1}}),
                 400, "invalid_request_error", "messages[0].content[0].type");
    expect_error(post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                               {"max_tokens", 1},
                                               {"response_format", {{"type", type}}}}),
                 400, "invalid_request_error", "response_format");
  }
  expect_alive();
}

// Issue 11.2: a chunked body was read whole (200 MB, RSS +235 MB) before auth or max_body_bytes
// applied. Now a request without a key is answered 401 with its body unread, and the server
// stops reading after a moment; with a key, reading stops at max_body_bytes (413).
TEST_F(HardeningTest, ChunkedBodyIsRefusedBeforeItIsRead) {
  start(big_body_config());
  const int64_t rss_before = rss_bytes();
  for (const char* key : {static_cast<const char*>(nullptr), kUserKey}) {
    RawConn conn(server_->port());
    ASSERT_TRUE(conn.connected());
    std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n";
    if (key != nullptr) head += std::string("Authorization: Bearer ") + key + "\r\n";
    ASSERT_TRUE(conn.send_all(head + "\r\n"));
    // Up to 200 MB of chunks, while the server lets us.
    const std::string chunk = "100000\r\n" + std::string(0x100000, 'x') + "\r\n";
    int64_t sent = 0;
    std::atomic<bool> stop{false};
    auto writer = std::async(std::launch::async, [&] {
      while (!stop.load() && sent < (200ll << 20)) {
        if (!conn.send_all(chunk)) break;
        sent += static_cast<int64_t>(chunk.size());
      }
    });
    const std::string answer = conn.read_until("\r\n\r\n{", 10000ms);
    const std::string rest = conn.read_until("}}", 2000ms);
    stop.store(true);
    writer.wait_for(15s);
    EXPECT_EQ(status_of(answer), key == nullptr ? 401 : 413) << answer.substr(0, 200);
    // The server stopped reading: far less than 200 MB went through (socket buffers, the
    // 4 MiB limit and at most 1 MiB discarded after the answer).
    EXPECT_LT(sent, 64ll << 20) << "key " << (key ? key : "none");
  }
  EXPECT_LT(rss_bytes() - rss_before, 48ll << 20);
  expect_alive();
}

// Issue 11.2: a few hundred idle or slowly-sent connections starved every worker, /health
// included. 300 of them (half sending their headers one byte at a time, half idle) while /health
// answers within 1 s and a completion succeeds.
TEST_F(HardeningTest, SlowAndIdleConnectionsDoNotStarveTheServer) {
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur < 1024) {
    lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, 4096);
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  start();  // 8 HTTP workers
  std::vector<std::unique_ptr<RawConn>> conns;
  for (int i = 0; i < 300; ++i) {
    conns.push_back(std::make_unique<RawConn>(server_->port()));
    ASSERT_TRUE(conns.back()->connected()) << i;
  }
  const std::string slow_head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-user-123\r\n";
  std::atomic<bool> stop{false};
  std::thread dribble([&] {
    for (size_t k = 0; !stop.load() && k < slow_head.size(); ++k) {
      for (size_t i = 0; i < conns.size(); i += 2) conns[i]->send_all(slow_head.substr(k, 1));
      std::this_thread::sleep_for(50ms);
    }
  });
  struct Join {  // a failed ASSERT below must not leave the thread joinable
    std::atomic<bool>& stop;
    std::thread& t;
    ~Join() {
      stop.store(true);
      if (t.joinable()) t.join();
    }
  } join{stop, dribble};
  std::this_thread::sleep_for(300ms);
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto h = client()->Get("/health");
    const auto took = std::chrono::steady_clock::now() - t0;
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
    EXPECT_LT(took, 1s);
    auto r = client()->Get("/ready");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  }
  auto res = post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 3}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

// Issue 11.2: httplib listened with a backlog of 5, so a burst of connections overflowed the
// accept queue and the kernel reset some of them (6 of 64 concurrent ~300 KB POSTs). 128 such
// POSTs at once, twice: every one gets an HTTP answer.
TEST_F(HardeningTest, BurstOfLargeBodiesIsAllAnswered) {
  start(big_body_config());
  const json body = {{"prompt", "x"}, {"max_tokens", 1}, {"user", std::string(300 << 10, 'u')}};
  const std::string request = http_request("POST", "/v1/completions", body.dump(), kUserKey, "Connection: close\r\n");
  for (int round = 0; round < 2; ++round) {
    constexpr int kConns = 128;
    std::vector<int> status(kConns, -1);
    std::vector<std::thread> clients;
    for (int i = 0; i < kConns; ++i)
      clients.emplace_back([&, i] {
        RawConn conn(server_->port());
        if (conn.connected() && conn.send_all(request))
          status[static_cast<size_t>(i)] = status_of(conn.read_until("", 60s));
      });
    for (std::thread& t : clients) t.join();
    for (int i = 0; i < kConns; ++i)
      EXPECT_GT(status[static_cast<size_t>(i)], 0) << "round " << round << " connection " << i;
  }
  expect_alive();
}

// The load test's rare "Connection error" under a loaded host: the server closed idle keep-alive
// connections after the 5 s it advertises, and Node's fetch (which closes at the hint − 1 s) sent
// its next request on such a socket a moment too late. The server now advertises 5 s and keeps an
// idle connection much longer: a request on a connection idle past the hint is answered.
TEST_F(HardeningTest, KeepAliveOutlastsWhatItAdvertises) {
  start();
  RawConn conn(server_->port());
  const std::string get = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_TRUE(conn.send_all(get));
  const std::string first = conn.read_until("}", 5000ms);
  EXPECT_EQ(status_of(first), 200) << first;
  EXPECT_NE(first.find("Keep-Alive: timeout=5, max=100"), std::string::npos) << first;
  std::this_thread::sleep_for(6500ms);  // past the advertised 5 s
  ASSERT_TRUE(conn.send_all(get));
  const std::string second = conn.read_until("}", 5000ms);
  EXPECT_EQ(status_of(second), 200) << "the idle connection was closed: '" << second << "'";
}

#ifndef GB_BASE_CHECK  // the settings are new
// A header block that does not arrive within header_timeout_s is answered 408 and closed; more
// than max_connections are refused at once with 503.
TEST_F(HardeningTest, HeaderTimeout) {
  ServerConfig cfg = test_config();
  cfg.header_timeout_s = 0.5;
  start(cfg);
  RawConn slow(server_->port());
  ASSERT_TRUE(slow.send_all("GET /health HTTP/1.1\r\nHo"));
  const std::string answer = slow.read_until("}", 5000ms);
  EXPECT_EQ(status_of(answer), 408) << answer;
  EXPECT_NE(answer.find("request headers did not arrive"), std::string::npos);
}

TEST_F(HardeningTest, ConnectionCapRefusesAtOnce) {
  ServerConfig cfg = test_config();
  cfg.max_connections = 20;
  start(cfg);
  std::vector<std::unique_ptr<RawConn>> idle;
  for (int i = 0; i < 20; ++i) idle.push_back(std::make_unique<RawConn>(server_->port()));
  std::this_thread::sleep_for(100ms);
  RawConn over(server_->port());
  const std::string refused = over.read_until("}", 3000ms);
  EXPECT_EQ(status_of(refused), 503) << refused;
  EXPECT_NE(refused.find("max_connections"), std::string::npos);
}
#endif

// Issue 11.8: a POST with neither Content-Length nor a chunked body waited for the read timeout
// (httplib read "until the client closes"); it is an empty body.
TEST_F(HardeningTest, PostWithoutBodyIsAnsweredAtOnce) {
  ServerConfig cfg = test_config();
  cfg.read_timeout_s = 20;
  start(cfg);
  RawConn conn(server_->port());
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(conn.send_all("POST /admin/glassbox/default/rollback HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                            std::string(kAdminKey) + "\r\n\r\n"));
  const std::string answer = conn.read_until("}}", 10000ms);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_EQ(status_of(answer), 400) << answer;  // there is no earlier default set; but answered
  RawConn gen(server_->port());
  ASSERT_TRUE(gen.send_all("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                           std::string(kUserKey) + "\r\n\r\n"));
  const std::string g = gen.read_until("}}", 10000ms);
  EXPECT_EQ(status_of(g), 400) << g;
  EXPECT_NE(g.find("not valid JSON"), std::string::npos);
}

// Issue 11.7: a client that half-closes after its request (shutdown(SHUT_WR)) got no answer: the
// FIN was taken for a disconnect. It is answered, streaming or not.
TEST_F(HardeningTest, HalfClosedClientGetsItsAnswer) {
  test::FakeEngineOptions opts;
  opts.token_delay = 20ms;
  start(test_config(), opts);
  for (bool stream : {false, true}) {
    RawConn conn(server_->port());
    const json body = {{"prompt", "x"}, {"max_tokens", 10}, {"stream", stream}};
    ASSERT_TRUE(conn.send_all(http_request("POST", "/v1/completions", body.dump(), kUserKey, "Connection: close\r\n")));
    conn.shutdown_write();
    const std::string answer = conn.read_until("", 10000ms);
    EXPECT_NE(answer.find("HTTP/1.1 200"), std::string::npos) << answer;
    if (stream) {
      EXPECT_NE(answer.find(R"("text":"H")"), std::string::npos) << answer;
      EXPECT_NE(answer.find("[DONE]"), std::string::npos) << answer;
    } else {
      EXPECT_NE(answer.find("Hello worl"), std::string::npos) << answer;
    }
  }
  EXPECT_TRUE(wait_idle());
  for (const std::string& line : logs()) EXPECT_NE(json::parse(line)["status"], 499) << line;
}

// Issue 11.7: httplib sets SO_REUSEPORT, so a second server bound the same port and the kernel
// split connections between them. The second must refuse to start, saying why.
TEST_F(HardeningTest, SecondServerOnTheSamePortRefuses) {
  start();
  ServerConfig cfg = test_config();
  cfg.port = server_->port();
  Server second(cfg, [](const std::string&) {});
  const Status st = second.start();
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("in use"), std::string::npos) << st.message();
  expect_alive();
}

// Issue 11.7: a FIFO as a control-vector path blocked an admin worker forever (opening a FIFO for
// reading waits for a writer). It must be a 400 naming the path at once, and the server must go on.
TEST_F(HardeningTest, FifoAsAVectorPathIsRefusedAtOnce) {
  start();
  const std::string fifo = gb::test::temp_dir() + "/vector.gguf";
  ASSERT_TRUE(gb::test::make_fifo(fifo));
  std::optional<httplib::Result> res;
  const auto t0 = std::chrono::steady_clock::now();
  const bool returned = gb::test::returns_within(
      [&] {
        res.emplace(client()->Put("/admin/glassbox/vectors/pipe", auth(kAdminKey), json{{"path", fifo}}.dump(),
                                  "application/json"));
      },
      5000ms, fifo);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(returned) << "PUT of a FIFO vector path blocked";
  EXPECT_LT(seconds, 2.0);
  ASSERT_TRUE(res.has_value() && *res);
  expect_error(*res, 400, "invalid_request_error", fifo);
  EXPECT_NE(json::parse((*res)->body)["error"]["message"].get<std::string>().find("FIFO"), std::string::npos)
      << (*res)->body;
  expect_alive();
  EXPECT_EQ(client()->Get("/admin/glassbox", auth(kAdminKey))->status, 200);
}

// Issue 11.7: a flat list of more than 256 token ids is one prompt, not "more than 256 prompts".
TEST_F(HardeningTest, LongTokenIdPromptIsOnePrompt) {
  start(test_config(), {}, /*ready=*/false);
  server_->attach(engine_.get(), &codec_, 1024);
  ASSERT_TRUE(server_->self_test(2000ms).is_ok());
  server_->set_ready();
  std::vector<int> ids(300, 65);
  auto res = post("/v1/completions", {{"prompt", ids}, {"max_tokens", 2}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["usage"]["prompt_tokens"], 300);
  std::vector<std::vector<int>> many(257, std::vector<int>{65});
  expect_error(post("/v1/completions", {{"prompt", many}, {"max_tokens", 1}}), 400, "invalid_request_error",
               "at most 256 prompts");
  expect_error(post("/v1/completions", {{"prompt", {65, 4294967299ll}}, {"max_tokens", 1}}), 400,
               "invalid_request_error", "outside the vocabulary");
}

// Issue 11.7: /v1/models showed the model's absolute path to every key; error messages quoted
// unbounded client input.
TEST_F(HardeningTest, ModelPathOnlyForAdminsAndBoundedMessages) {
  start(big_body_config());
  auto c = client();
  json user = json::parse(c->Get("/v1/models", auth())->body);
  EXPECT_FALSE(user["data"][0].contains("root"));
  EXPECT_EQ(c->Get("/v1/models", auth())->body.find("/models/tiny"), std::string::npos);
  json admin = json::parse(c->Get("/v1/models", auth(kAdminKey))->body);
  EXPECT_EQ(admin["data"][0]["root"], "/models/tiny");

  auto res = post("/v1/completions", {{"model", std::string(100000, 'm')}, {"prompt", "x"}});
  expect_error(res, 404, "not_found_error", "does not exist");
  EXPECT_LT(res->body.size(), 400u);
  auto nf = c->Get(("/v1/models/" + std::string(5000, 'q')).c_str(), auth());
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->status, 404);
  EXPECT_LT(nf->body.size(), 400u);
}

#ifndef GB_BASE_CHECK
// Issue 10.4: engine failures reach the server as a code, not as text to search.
TEST_F(HardeningTest, EngineErrorCodesMapToStatuses) {
  test::FakeEngineOptions opts;
  opts.fail_with = "layer 3 resid_post: NaN";
  opts.fail_code = EngineErrorCode::kNonFinite;
  start(test_config(), opts, /*ready=*/false);
  server_->attach(engine_.get(), &codec_, kContext);
  server_->set_ready();
  auto res = post("/v1/completions", {{"prompt", "x"}});
  expect_error(res, 500, "server_error", "non-finite");
  EXPECT_EQ(json::parse(res->body)["error"]["code"], "non_finite_activations");
  EXPECT_NE(res->body.find("layer 3 resid_post"), std::string::npos);
}
#endif

}  // namespace
}  // namespace gb::server
