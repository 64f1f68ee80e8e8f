// Stop-string filtering and per-choice text assembly.
#include "server/text_stream.h"

#include <algorithm>

namespace gb::server {

StopStringFilter::StopStringFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {}

std::string StopStringFilter::push(std::string_view text, bool* stopped) {
  *stopped = false;
  pending_.append(text);
  // Everything before pending_ was checked to contain no stop string and to end in no prefix
  // of one, so a match can only start inside pending_.
  size_t first = std::string::npos;
  for (const std::string& s : stops_) first = std::min(first, pending_.find(s));
  if (first != std::string::npos) {
    *stopped = true;
    std::string out = pending_.substr(0, first);
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopStringFilter::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

ChoiceText::ChoiceText(std::unique_ptr<StreamDetokenizer> detok, std::vector<std::string> stops)
    : detok_(std::move(detok)), filter_(std::move(stops)) {}

void ChoiceText::emit(ChoiceDelta* delta, std::string text, bool all) {
  emitted_bytes_ += static_cast<int64_t>(text.size());
  delta->text += text;
  size_t n = 0;
  for (; n < held_.size(); ++n) {
    HeldToken& h = held_[n];
    const int64_t size = static_cast<int64_t>(h.text.text.size());
    if (released_bytes_ + size > emitted_bytes_) {
      if (!all) break;
      // Past the end of the text (a stop string, or text the filter dropped): cut it there.
      h.text.text.resize(static_cast<size_t>(std::max<int64_t>(0, emitted_bytes_ - released_bytes_)));
    }
    released_bytes_ += static_cast<int64_t>(h.text.text.size());
    delta->tokens.push_back(std::move(h.token));
    delta->token_texts.push_back(std::move(h.text));
  }
  held_.erase(held_.begin(), held_.begin() + static_cast<std::ptrdiff_t>(n));
}

ChoiceDelta ChoiceText::on_event(GenerationEvent& event) {
  ChoiceDelta delta;
  if (finished_) {
    delta.finished = true;
    return delta;
  }
  if (event.prompt_tokens > 0) prompt_tokens_ = event.prompt_tokens;
  if (event.cached_prompt_tokens > 0) cached_prompt_tokens_ = event.cached_prompt_tokens;
  for (GeneratedToken& t : event.tokens) {
    ++completion_tokens_;
    HeldToken h;
    // The alternatives' texts at this place, before the chosen token moves the decoder on.
    h.text.top.reserve(t.top.size());
    for (const TokenLogprob& alt : t.top) h.text.top.push_back(detok_->peek(alt.token));
    h.text.text = detok_->push(t.token);
    bool stopped = false;
    std::string out = filter_.push(h.text.text, &stopped);
    h.token = std::move(t);
    held_.push_back(std::move(h));
    emit(&delta, std::move(out), /*all=*/stopped);
    if (stopped) {
      finished_ = stopped_by_string_ = true;
      finish_ = FinishReason::kStop;
      delta.finished = true;
      return delta;
    }
  }
  if (event.finish != FinishReason::kNone) {
    bool stopped = false;
    std::string rest = detok_->flush();
    // The decoder's leftover (an incomplete character at the end) belongs to the last token.
    if (!held_.empty()) held_.back().text.text += rest;
    std::string out = filter_.push(rest, &stopped);
    if (stopped) {
      stopped_by_string_ = true;
    } else {
      out += filter_.flush();
    }
    emit(&delta, std::move(out), /*all=*/true);
    finished_ = true;
    finish_ = stopped ? FinishReason::kStop : event.finish;
    error_ = event.error;
    error_code_ = event.error_code;
    delta.finished = true;
  }
  return delta;
}

ChoiceDelta ChoiceText::stop_now() {
  ChoiceDelta delta;
  delta.finished = true;
  if (finished_) return delta;
  bool stopped = false;
  std::string rest = detok_->flush();
  if (!held_.empty()) held_.back().text.text += rest;
  std::string out = filter_.push(rest, &stopped);
  if (!stopped) out += filter_.flush();
  emit(&delta, std::move(out), /*all=*/true);
  finished_ = stopped_by_repetition_ = true;
  finish_ = FinishReason::kStop;
  return delta;
}

}  // namespace gb::server
