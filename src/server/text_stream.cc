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
    bool stopped = false;
    delta.text += filter_.push(detok_->push(t.token), &stopped);
    delta.tokens.push_back(std::move(t));
    if (stopped) {
      finished_ = stopped_by_string_ = true;
      finish_ = FinishReason::kStop;
      delta.finished = true;
      return delta;
    }
  }
  if (event.finish != FinishReason::kNone) {
    bool stopped = false;
    delta.text += filter_.push(detok_->flush(), &stopped);
    if (stopped) {
      stopped_by_string_ = true;
    } else {
      delta.text += filter_.flush();
    }
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
  delta.text = filter_.push(detok_->flush(), &stopped);
  if (!stopped) delta.text += filter_.flush();
  finished_ = stopped_by_repetition_ = true;
  finish_ = FinishReason::kStop;
  return delta;
}

}  // namespace gb::server
