#include "engine/scheduler.h"

#include <algorithm>
#include <cassert>

namespace gb {

Scheduler::Scheduler(const SchedulerConfig& config, BlockManager* blocks) : config_(config), blocks_(blocks) {
  assert(!config.recurrent_state || blocks->n_state_slots() >= config.max_num_seqs);
  scheduled_.reserve(config.max_num_seqs);
  running_.reserve(config.max_num_seqs);
}

void Scheduler::release_state_slot(Sequence* seq) {
  if (seq->state_slot >= 0) blocks_->release_state_slot(seq->state_slot);
  seq->state_slot = -1;
}

void Scheduler::add(std::unique_ptr<Sequence> seq) { waiting_.push_back(std::move(seq)); }

void Scheduler::preempt_last() {
  std::unique_ptr<Sequence> victim = std::move(running_.back());
  running_.pop_back();
  blocks_->release(&victim->block_table);
  release_state_slot(victim.get());
  victim->block_hashes.clear();
  victim->n_computed = 0;
  ++preemptions_;
  waiting_.push_front(std::move(victim));
}

PromptLogprobRange prompt_logprob_range(const Sequence& seq, int32_t start, int32_t n) {
  if (seq.request.prompt_logprobs < 0) return {};
  const int32_t begin = std::max(start, seq.next_prompt_logprob - 1);
  const int32_t end = std::min(start + n, seq.n_prompt - 1);
  return begin < end ? PromptLogprobRange{begin, end} : PromptLogprobRange{begin, begin};
}

namespace {

// Cuts a chunk [start, start + n) so that its prompt-logprob rows fit in *rows_left (which it
// then takes); 0 when none fit and the chunk would need some.
int32_t fit_prompt_logprob_rows(const Sequence& seq, int32_t start, int32_t n, int64_t* rows_left) {
  const PromptLogprobRange r = prompt_logprob_range(seq, start, n);
  if (r.size() <= *rows_left) {
    *rows_left -= r.size();
    return n;
  }
  const int32_t cut = r.begin + static_cast<int32_t>(*rows_left) - start;
  *rows_left = 0;
  return cut;
}

}  // namespace

const std::vector<ScheduledSeq>& Scheduler::schedule() {
  scheduled_.clear();
  int64_t budget = config_.max_num_batched_tokens;
  int64_t logprob_rows = config_.max_prompt_logprob_rows;

  // Running sequences, oldest first. A sequence that cannot get blocks preempts the newest
  // running sequence (possibly itself) until it fits.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* seq = running_[i].get();
    const int32_t remaining = static_cast<int32_t>(seq->tokens.size()) - seq->n_computed;
    const int32_t n = fit_prompt_logprob_rows(
        *seq, seq->n_computed, static_cast<int32_t>(std::min<int64_t>(remaining, budget)), &logprob_rows);
    if (n == 0) {  // a scoring prefill waits for next step's prompt-logprob rows
      ++i;
      continue;
    }
    bool self_preempted = false;
    while (!blocks_->grow(&seq->block_table, int64_t{seq->n_computed} + n)) {
      const bool is_last = running_.back().get() == seq;
      preempt_last();
      if (is_last) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // it was the newest: nothing after it remains
    scheduled_.push_back(
        {seq, seq->n_computed, n, seq->n_computed + n == static_cast<int32_t>(seq->tokens.size()), false});
    budget -= n;
    ++i;
  }

  // Waiting sequences in arrival order (preempted ones first), without preempting anyone.
  while (!waiting_.empty() && budget > 0 && static_cast<int32_t>(running_.size()) < config_.max_num_seqs) {
    Sequence* seq = waiting_.front().get();
    const int32_t len = static_cast<int32_t>(seq->tokens.size());
    // Sized for the whole request (tokens holds capacity for prompt + max_tokens), so its decode
    // steps never grow them.
    const size_t max_blocks = (seq->tokens.capacity() + blocks_->block_size() - 1) / blocks_->block_size();
    std::vector<int32_t> table;
    std::vector<uint64_t> hashes;
    table.reserve(max_blocks);
    hashes.reserve(max_blocks);
    // At least the last token is computed so the step yields logits to sample from.
    const int32_t max_hit_blocks = (len - 1) / blocks_->block_size();
    const int32_t hits =
        seq->skip_prefix_lookup || config_.recurrent_state
            ? 0
            : blocks_->acquire_prefix(seq->tokens, seq->request.cache_salt, max_hit_blocks, &table, &hashes);
    const int32_t cached = hits * blocks_->block_size();
    int64_t rows_left = logprob_rows;
    const int32_t n = fit_prompt_logprob_rows(
        *seq, cached, static_cast<int32_t>(std::min<int64_t>(len - cached, budget)), &rows_left);
    if (n == 0 || !blocks_->grow(&table, int64_t{cached} + n)) {
      blocks_->release(&table);
      break;
    }
    const bool first = !seq->admitted_once;
    if (first) {
      prefix_queries_ += seq->n_prompt;
      prefix_hits_ += std::min(cached, seq->n_prompt);
      seq->n_cached_prompt = std::min(cached, seq->n_prompt);
      seq->admitted_once = true;
    }
    if (config_.recurrent_state) {
      // running_.size() < max_num_seqs <= the slots, so one is free.
      seq->state_slot = blocks_->acquire_state_slot();
      assert(seq->state_slot >= 0);
    }
    seq->block_table = std::move(table);
    seq->block_hashes = std::move(hashes);
    seq->n_computed = cached;
    scheduled_.push_back({seq, cached, n, cached + n == len, first});
    budget -= n;
    logprob_rows = rows_left;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  return scheduled_;
}

void Scheduler::publish_full_blocks(Sequence* seq) {
  if (config_.recurrent_state) return;  // no prefix caching for hybrid models
  const int32_t bs = blocks_->block_size();
  const size_t full = static_cast<size_t>(seq->n_computed / bs);
  while (seq->block_hashes.size() < full) {
    const size_t b = seq->block_hashes.size();
    const uint64_t parent = b == 0 ? 0 : seq->block_hashes[b - 1];
    const uint64_t h = BlockManager::hash_block(parent, std::span<const int32_t>(seq->tokens).subspan(b * bs, bs),
                                                seq->request.cache_salt);
    blocks_->publish(seq->block_table[b], h);
    seq->block_hashes.push_back(h);
  }
}

void Scheduler::commit() {
  for (const ScheduledSeq& s : scheduled_) {
    s.seq->n_computed = s.start + s.n_tokens;
    publish_full_blocks(s.seq);
  }
  scheduled_.clear();
}

void Scheduler::finish(Sequence* seq) {
  blocks_->release(&seq->block_table);
  release_state_slot(seq);
  auto r = std::find_if(running_.begin(), running_.end(), [&](const auto& p) { return p.get() == seq; });
  if (r != running_.end()) {
    running_.erase(r);
    return;
  }
  auto w = std::find_if(waiting_.begin(), waiting_.end(), [&](const auto& p) { return p.get() == seq; });
  if (w != waiting_.end()) waiting_.erase(w);
}

}  // namespace gb
