// The server over real sockets: endpoints, streaming, every error status, disconnects,
// metrics, logs and drain, against the FakeEngine on an ephemeral port.
#include <gtest/gtest.h>
#include <httplib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <thread>

#include "server/http_fixture.h"

namespace gb::server {
namespace {

TEST_F(HttpTest, ProbesFollowTheLifecycle) {
  start(test_config(), {}, /*ready=*/false);
  auto c = client();
  EXPECT_EQ(c->Get("/health")->status, 200);
  EXPECT_EQ(c->Get("/ready")->status, 503);
  expect_error(post("/v1/completions", {{"prompt", "x"}}), 503, "service_unavailable", "still loading");
  make_ready();
  EXPECT_EQ(c->Get("/ready")->status, 200);
  EXPECT_EQ(post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}})->status, 200);
}

TEST_F(HttpTest, CompletionNonStreaming) {
  start();
  auto res = post("/v1/completions", {{"model", "tiny"}, {"prompt", "Say hi"}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  json body = json::parse(res->body);
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["model"], "tiny");
  EXPECT_EQ(body["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(res->get_header_value("X-Request-Id"), body["id"]);
  EXPECT_EQ(body["choices"][0]["text"], "Hello world. The end.");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(body["choices"][0]["index"], 0);
  EXPECT_TRUE(body["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(body["usage"]["prompt_tokens"], 7);       // BOS + 6 bytes
  EXPECT_EQ(body["usage"]["completion_tokens"], 22);  // 21 bytes + EOS
  EXPECT_EQ(body["usage"]["total_tokens"], 29);
}

TEST_F(HttpTest, MaxTokensAndContextDefault) {
  start();
  json body = json::parse(post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 5}})->body);
  EXPECT_EQ(body["choices"][0]["text"], "Hello");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["completion_tokens"], 5);
  post("/v1/completions", {{"prompt", "x"}});
  auto reqs = engine_->submitted();
  ASSERT_EQ(reqs.size(), 3u);  // self-test + 2
  EXPECT_EQ(reqs[1].max_tokens, 5);
  EXPECT_EQ(reqs[2].max_tokens, kContext - 2);  // the rest of the context
  expect_error(post("/v1/completions", {{"prompt", "x"}, {"max_tokens", kContext}}), 400, "invalid_request_error",
               "you requested 258 tokens (2 in the prompt, 256 in the completion)");
}

TEST_F(HttpTest, StopStringEndsAndCancelsTheEngineRequest) {
  start();
  json body = json::parse(post("/v1/completions", {{"prompt", "x"}, {"stop", {"world", "zzz"}}})->body);
  EXPECT_EQ(body["choices"][0]["text"], "Hello ");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(body["usage"]["completion_tokens"], 11);  // up to the token that completed "world"
  EXPECT_TRUE(engine_->wait_cancelled(1, 2000ms));
}

TEST_F(HttpTest, CompletionStreamingMatchesNonStreaming) {
  start();
  const std::string sse =
      post_stream("/v1/completions",
                  {{"prompt", "x"}, {"stream", true}, {"stop", "end"}, {"stream_options", {{"include_usage", true}}}});
  auto events = sse_payloads(sse);
  ASSERT_GE(events.size(), 3u) << sse;
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  std::string finish;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    json chunk = json::parse(events[i]);
    EXPECT_EQ(chunk["object"], "text_completion");
    EXPECT_TRUE(chunk.contains("usage") && chunk["usage"].is_null());
    text += chunk["choices"][0]["text"].get<std::string>();
    if (!chunk["choices"][0]["finish_reason"].is_null()) finish = chunk["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(text, "Hello world. The ");
  EXPECT_EQ(finish, "stop");
  json usage = json::parse(events[events.size() - 2]);
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 20);
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 2);
}

TEST_F(HttpTest, ChatStreamingAndNot) {
  start();
  json req = {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_completion_tokens", 5}};
  json full = json::parse(post("/v1/chat/completions", req)->body);
  EXPECT_EQ(full["object"], "chat.completion");
  EXPECT_EQ(full["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(full["choices"][0]["message"]["content"], "Hello");
  EXPECT_EQ(full["usage"]["prompt_tokens"], std::string("<|user|>hi\n<|assistant|>").size());
  req["stream"] = true;
  auto events = sse_payloads(post_stream("/v1/chat/completions", req));
  ASSERT_GE(events.size(), 3u);
  json first = json::parse(events[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  for (size_t i = 1; i + 1 < events.size(); ++i) {
    json d = json::parse(events[i])["choices"][0];
    EXPECT_FALSE(d["delta"].contains("role"));
    if (d["delta"].contains("content")) text += d["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(text, "Hello");
  EXPECT_EQ(json::parse(events[events.size() - 2])["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(events.back(), "[DONE]");
}

TEST_F(HttpTest, SeedsAreDeterministicAndNGetsSeedPlusI) {
  start();
  json req = {{"prompt", "x"}, {"temperature", 1.0}, {"seed", 42}, {"n", 2}, {"max_tokens", 12}};
  json a = json::parse(post("/v1/completions", req)->body);
  json b = json::parse(post("/v1/completions", req)->body);
  ASSERT_EQ(a["choices"].size(), 2u);
  EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);
  EXPECT_EQ(a["choices"][1]["text"], b["choices"][1]["text"]);
  EXPECT_NE(a["choices"][0]["text"], a["choices"][1]["text"]);
  EXPECT_EQ(a["choices"][1]["index"], 1);
  EXPECT_EQ(a["usage"]["completion_tokens"], 24);
  auto reqs = engine_->submitted();
  EXPECT_EQ(reqs[1].sampling.seed, 42u);
  EXPECT_EQ(reqs[2].sampling.seed, 43u);
}

TEST_F(HttpTest, LogprobsBothEndpoints) {
  start();
  json c = json::parse(post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 3}, {"logprobs", 2}})->body);
  json lp = c["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json::parse(R"(["H","e","l"])"));
  EXPECT_EQ(lp["token_logprobs"].size(), 3u);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(lp["text_offset"], json::parse("[0,1,2]"));
  json chat = json::parse(post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                                        {"max_tokens", 2},
                                                        {"logprobs", true},
                                                        {"top_logprobs", 1}})
                              ->body);
  json content = chat["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["token"], "H");
  EXPECT_EQ(content[0]["logprob"], -0.25);
  EXPECT_EQ(content[0]["top_logprobs"].size(), 1u);
}

TEST_F(HttpTest, ModelsEndpoint) {
  start();
  auto c = client();
  json list = json::parse(c->Get("/v1/models", auth())->body);
  EXPECT_EQ(list["object"], "list");
  EXPECT_EQ(list["data"][0]["id"], "tiny");
  EXPECT_EQ(list["data"][0]["max_model_len"], kContext);
  EXPECT_EQ(c->Get("/v1/models/tiny", auth())->status, 200);
  expect_error(c->Get("/v1/models/other", auth()), 404, "not_found_error", "does not exist");
}

TEST_F(HttpTest, AuthErrors) {
  start();
  auto c = client();
  expect_error(c->Post("/v1/completions", json{{"prompt", "x"}}.dump(), "application/json"), 401,
               "authentication_error", "Missing API key");
  expect_error(post("/v1/completions", {{"prompt", "x"}}, "sk-wrong"), 401, "authentication_error", "Invalid API key");
  expect_error(c->Get("/v1/models"), 401, "authentication_error", "Missing API key");
  expect_error(c->Get("/admin/config", auth(kUserKey)), 403, "permission_error", "needs role admin");
  auto admin = c->Get("/admin/config", auth(kAdminKey));
  ASSERT_EQ(admin->status, 200);
  EXPECT_EQ(admin->body.find(kAdminKey), std::string::npos);
  EXPECT_EQ(admin->body.find(kUserKey), std::string::npos);
}

TEST_F(HttpTest, RequestErrors) {
  start();
  auto c = client();
  expect_error(post("/v1/completions", {{"model", "gpt-4"}, {"prompt", "x"}}), 404, "not_found_error",
               "'gpt-4' does not exist");
  expect_error(post("/v1/completions", {{"prompt", "x"}, {"top_p", 2}}), 400, "invalid_request_error", "top_p");
  expect_error(c->Post("/v1/completions", auth(), "{not json", "application/json"), 400, "invalid_request_error",
               "not valid JSON");
  expect_error(c->Post("/v1/completions", auth(), std::string(10000, ' '), "application/json"), 413,
               "invalid_request_error", "max_body_bytes = 8192");
  expect_error(c->Get("/v1/nothing", auth()), 404, "not_found_error", "no route");
}

TEST_F(HttpTest, RateLimitIs429WithRetryAfter) {
  start();
  EXPECT_EQ(post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}}, kLimitedKey)->status, 200);
  EXPECT_EQ(post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}}, kLimitedKey)->status, 200);
  auto res = post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}}, kLimitedKey);
  expect_error(res, 429, "rate_limit_error", "rate limit of 60 requests per minute");
  EXPECT_EQ(res->get_header_value("Retry-After"), "1");
  EXPECT_EQ(post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}})->status, 200);  // other keys unaffected
}

TEST_F(HttpTest, QueueFullIs429) {
  start();
  engine_->set_waiting(10);
  auto res = post("/v1/completions", {{"prompt", "x"}});
  expect_error(res, 429, "rate_limit_error", "queue is full");
  EXPECT_FALSE(res->get_header_value("Retry-After").empty());
  engine_->set_waiting(0);
  engine_->set_queue_full(true);
  expect_error(post("/v1/completions", {{"prompt", "x"}, {"n", 2}}), 429, "rate_limit_error", "queue full");
  EXPECT_EQ(server_->in_flight(), 0);
}

TEST_F(HttpTest, ConcurrencyLimitIs429) {
  ServerConfig cfg = test_config();
  cfg.max_concurrent_requests = 1;
  test::FakeEngineOptions opts;
  opts.token_delay = 20ms;
  start(cfg, opts);
  auto slow = std::async(std::launch::async, [&] {
    return post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 20}})->status;
  });
  while (server_->in_flight() == 0) std::this_thread::sleep_for(1ms);
  expect_error(post("/v1/completions", {{"prompt", "x"}}), 429, "rate_limit_error", "max_concurrent_requests = 1");
  EXPECT_EQ(slow.get(), 200);
}

TEST_F(HttpTest, ClientDisconnectMidStreamCancels) {
  test::FakeEngineOptions opts;
  opts.token_delay = 5ms;
  start(test_config(), opts);
  const std::string got =
      post_stream("/v1/completions", {{"prompt", "x"}, {"stream", true}, {"ignore_eos", true}}, /*stop_after=*/3);
  EXPECT_FALSE(got.empty());
  EXPECT_TRUE(engine_->wait_cancelled(1, 3000ms));
  EXPECT_TRUE(wait_idle());
  bool logged = false;
  for (const std::string& line : logs()) logged |= json::parse(line)["status"] == 499;
  EXPECT_TRUE(logged);
}

// cpp-httplib 0.11 gives a handler no disconnect signal; ConnectionWatch does, so a client that
// gives up on a non-streaming request stops its generation too.
TEST_F(HttpTest, ClientDisconnectNonStreamingCancels) {
  test::FakeEngineOptions opts;
  opts.token_delay = 20ms;
  start(test_config(), opts);
  const std::string body = json{{"prompt", "x"}, {"max_tokens", 200}, {"ignore_eos", true}}.dump();
  const std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + std::string(kUserKey) +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  const size_t before = engine_->submitted().size();  // the self-test's request
  const int cancelled_before = engine_->cancelled_count();
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server_->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  // Leave once the engine has the request (200 tokens take 4 s; the cancel must come long before).
  const auto end = std::chrono::steady_clock::now() + 3000ms;
  while (engine_->submitted().size() == before && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(5ms);
  ASSERT_EQ(engine_->submitted().size(), before + 1);
  close(fd);
  EXPECT_TRUE(engine_->wait_cancelled(cancelled_before + 1, 1000ms));
  EXPECT_TRUE(wait_idle());
  bool logged = false;
  for (const std::string& line : logs()) logged |= json::parse(line)["status"] == 499;
  EXPECT_TRUE(logged);
}

TEST_F(HttpTest, EngineErrorIs500AndTimeoutIs504) {
  test::FakeEngineOptions opts;
  start();
  // A second server on a failing engine.
  server_->stop();
  opts.fail_with = "non-finite logits";
  engine_ = std::make_unique<test::FakeEngine>(opts);
  server_ = std::make_unique<Server>(test_config());
  ASSERT_TRUE(server_->start().is_ok());
  server_->attach(engine_.get(), &codec_, kContext);
  Status st = server_->self_test(1000ms);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("non-finite logits"), std::string::npos) << st.message();
  server_->set_ready();  // ready regardless, to exercise the request path
  expect_error(post("/v1/completions", {{"prompt", "x"}}), 500, "server_error", "non-finite logits");
  server_->stop();

  ServerConfig cfg = test_config();
  cfg.request_timeout_s = 0.2;
  opts = {};
  opts.token_delay = 50ms;
  engine_ = std::make_unique<test::FakeEngine>(opts);
  server_ = std::make_unique<Server>(cfg);
  ASSERT_TRUE(server_->start().is_ok());
  server_->attach(engine_.get(), &codec_, kContext);
  server_->set_ready();
  expect_error(post("/v1/completions", {{"prompt", "x"}, {"ignore_eos", true}}), 504, "timeout_error",
               "request_timeout_s");
}

TEST_F(HttpTest, MetricsExposeRequestsAndEngineState) {
  start();
  post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 3}});
  post("/v1/completions", {{"prompt", "x"}});
  post("/v1/completions", {{"prompt", "x"}, {"top_p", 5}});
  // glassbox_http_requests_total is counted by httplib's logger after the answer is written, so
  // the last request's count may land just after its client has the answer: wait for it.
  httplib::Result res = client()->Get("/metrics");
  for (int i = 0; i < 200; ++i) {
    if (i > 0) res = client()->Get("/metrics");
    if (res && res->body.find("status=\"400\"} 1") != std::string::npos &&
        res->body.find("status=\"200\"} 2") != std::string::npos)
      break;
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  const std::string& m = res->body;
  EXPECT_NE(res->get_header_value("Content-Type").find("text/plain"), std::string::npos);
  for (const char* want : {
           "glassbox_request_finished_total{finish_reason=\"length\",model=\"tiny\"} 1",
           "glassbox_request_finished_total{finish_reason=\"stop\",model=\"tiny\"} 1",
           "glassbox_http_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 2",
           "glassbox_http_requests_total{endpoint=\"/v1/completions\",status=\"400\"} 1",
           "glassbox_requests_rejected_total{reason=\"invalid\"} 1",
           "glassbox_time_to_first_token_seconds_count{model=\"tiny\"} 2",
           "glassbox_e2e_request_latency_seconds_count{model=\"tiny\"} 2",
           "glassbox_request_queue_time_seconds_count{model=\"tiny\"} 2",
           "glassbox_generation_tokens_total{model=\"tiny\"} 25",
           "glassbox_prompt_tokens_total{model=\"tiny\"} 4",
           "glassbox_request_generation_tokens_bucket{model=\"tiny\",le=\"4\"} 1",
           "glassbox_kv_cache_blocks_capacity 100",
           "glassbox_kv_cache_blocks_free",
           "glassbox_prefix_cache_hit_rate 0.4",
           "glassbox_num_requests_running",
           "glassbox_num_requests_waiting 0",
           "glassbox_model_requests_running{model=\"tiny\"}",
           "glassbox_engine_step_duration_seconds_bucket{le=\"0.0025\"} 1",
           "glassbox_engine_step_duration_seconds_bucket{le=\"0.25\"} 1",
           "glassbox_engine_step_duration_seconds_bucket{le=\"0.5\"} 2",
           "glassbox_engine_step_duration_seconds_count 2",
           "glassbox_inter_token_latency_seconds_bucket",
           "glassbox_server_ready 1",
       }) {
    EXPECT_NE(m.find(want), std::string::npos) << "missing: " << want << "\n" << m;
  }
}

TEST_F(HttpTest, OneLogLinePerRequestWithoutSecretsOrPrompts) {
  start();
  post("/v1/completions", {{"prompt", "my secret prompt"}, {"max_tokens", 2}, {"user", "u-7"}});
  post("/v1/completions", {{"prompt", "x"}}, "sk-wrong");
  auto lines = logs();
  ASSERT_EQ(lines.size(), 2u);
  json ok = json::parse(lines[0]);
  EXPECT_EQ(ok["key_id"], "alice");
  EXPECT_EQ(ok["status"], 200);
  EXPECT_EQ(ok["completion_tokens"], 2);
  EXPECT_EQ(ok["prompt_tokens"], 17);
  EXPECT_EQ(ok["finish_reasons"], json::array({"length"}));
  EXPECT_EQ(ok["user"], "u-7");
  EXPECT_TRUE(ok.contains("ttft_s"));
  EXPECT_TRUE(ok.contains("e2e_s"));
  EXPECT_EQ(json::parse(lines[1])["status"], 401);
  for (const std::string& l : lines) {
    EXPECT_EQ(l.find("secret prompt"), std::string::npos);
    EXPECT_EQ(l.find("sk-"), std::string::npos);
  }
}

TEST_F(HttpTest, LogPromptsWhenConfigured) {
  ServerConfig cfg = test_config();
  cfg.log_prompts = true;
  start(cfg);
  post("/v1/completions", {{"prompt", "visible prompt"}, {"max_tokens", 1}});
  auto lines = logs();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(json::parse(lines[0])["prompt"], json::array({"visible prompt"}));
}

TEST_F(HttpTest, DrainFinishesOrCancelsAndRefusesNewWork) {
  test::FakeEngineOptions opts;
  opts.token_delay = 5ms;
  start(test_config(), opts);
  // A short request finishes within the drain deadline; a long stream is cancelled at it.
  auto short_req = std::async(std::launch::async, [&] {
    return post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 5}})->status;
  });
  auto long_stream = std::async(std::launch::async, [&] {
    return post_stream("/v1/completions", {{"prompt", "x"}, {"stream", true}, {"ignore_eos", true}});
  });
  while (server_->in_flight() < 2) std::this_thread::sleep_for(1ms);
  auto drained = std::async(std::launch::async, [&] { server_->drain(300ms); });
  while (server_->state() != Server::State::kDraining) std::this_thread::sleep_for(1ms);
  expect_error(post("/v1/completions", {{"prompt", "x"}}), 503, "service_unavailable", "shutting down");
  EXPECT_EQ(client()->Get("/ready")->status, 503);
  EXPECT_EQ(client()->Get("/health")->status, 200);
  drained.get();
  EXPECT_EQ(server_->in_flight(), 0);
  EXPECT_EQ(short_req.get(), 200);
  auto events = sse_payloads(long_stream.get());
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  json err = json::parse(events[events.size() - 2]);
  EXPECT_EQ(err["error"]["code"], "draining");
}

TEST_F(HttpTest, SlowEngineDoesNotBlockProbes) {
  test::FakeEngineOptions opts;
  opts.token_delay = 10ms;
  start(test_config(), opts);
  auto busy = std::async(std::launch::async, [&] {
    return post_stream("/v1/completions", {{"prompt", "x"}, {"stream", true}, {"max_tokens", 30}});
  });
  while (server_->in_flight() == 0) std::this_thread::sleep_for(1ms);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(client()->Get("/health")->status, 200);
  EXPECT_EQ(client()->Get("/metrics")->status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 200ms);
  EXPECT_EQ(sse_payloads(busy.get()).back(), "[DONE]");
}

}  // namespace
}  // namespace gb::server
