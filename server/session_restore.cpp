// Session snapshots and their restore (`crl serve --snapshot-dir`, issue 19 item 2; the files and the
// ownership protocol: server/snapshot_store.h).
//
// Restore = replay (PROTOCOL.md section 2): the snapshot's creation request builds and starts the episode as
// create() did, and each logged step goes through the same step code (apply_step) as when it was first sent,
// so the episode, the client's prompt, next_turn_id and the stored answer of the last turn (for a retry) are
// rebuilt exactly. The replay must end at the snapshot's state hash; otherwise 500 snapshot_mismatch, never
// a silently different episode. A snapshot written under another server configuration (tokenizer, chat
// template, the operator's --env-param values) would replay into a different episode and is refused as
// bad_snapshot before any replay.
//
// What a client sees. A request naming an episode this server does not hold:
//   * snapshot present, holder gone: restored here, then answered as if nothing happened (same state hash);
//     GET /v1/episodes/{id} says restored = true and restored_from_turn; a step past the snapshot's turns
//     (they died with a killed backend) gets 409 steps_lost naming the lost turns;
//   * snapshot or holder present, holder alive (serving elsewhere, or draining and writing its snapshots):
//     503 session_held_elsewhere naming the holder, retry_after 1;
//   * no snapshot, the id's backend tag has no live backend: 503 session_lost naming the episode and the tag;
//   * otherwise (an untagged id, or this server's own tag): 404 unknown_episode as without snapshots.
#include <chrono>
#include <iostream>

#include "engine/error.h"
#include "server/episode_service.h"
#include "wire/api_error.h"

namespace crl::server {

using namespace wire;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

ApiError not_held(const std::string& id, const std::string& why) {
  return ApiError(404, "unknown_episode", "no episode \"" + id + "\" (" + why + ")", "episode_id");
}

}  // namespace

std::shared_ptr<Session> EpisodeService::find_session(const std::string& id) {
  if (std::shared_ptr<Session> held = sessions_.try_find(id)) return held;
  if (!store_) return sessions_.find(id);  // throws 404 unknown_episode
  return restore(id);
}

std::shared_ptr<Session> EpisodeService::restore(const std::string& id) {
  // Only well-formed ids ever become file names (no "../", no separators).
  if (!is_episode_id(id)) return sessions_.find(id);
  std::lock_guard restoring(restore_mutex_);
  if (std::shared_ptr<Session> held = sessions_.try_find(id)) return held;  // restored meanwhile
  const auto start = std::chrono::steady_clock::now();
  const std::string path = store_->snapshot_path(id);
  std::optional<proto::SessionSnapshot> snapshot;
  try {
    snapshot = store_->read(id);
  } catch (const ApiError&) {
    metrics_.snapshot_restore_failures->add();
    throw;
  }
  const std::string tag = episode_id_tag(id);
  if (!snapshot) {
    if (tag.empty())
      throw not_held(id, "never created, deleted, or reaped when idle; no snapshot in " + store_->dir());
    if (const std::string other = store_->live_instance_with_tag(tag); !other.empty()) {
      throw ApiError(503, "session_held_elsewhere",
                     "episode " + id + " belongs to backend " + other +
                         ", which is running (it has written no snapshot of it yet); retry",
                     "episode_id")
          .with_retry_after(1);
    }
    if (tag == options_.backend_tag) {
      throw not_held(id,
                     "never created, deleted, reaped, or lost with an earlier process of this backend "
                     "before its first snapshot; no snapshot in " +
                         store_->dir());
    }
    throw ApiError(503, "session_lost",
                   "episode " + id + " lived on backend " + tag + ", which is gone, and has no snapshot in " +
                       store_->dir() + " (it ended before the episode's first snapshot): the episode is lost",
                   "episode_id");
  }
  const SnapshotStore::Claim claim = store_->claim(id);
  if (!claim.claimed) {
    throw ApiError(503, "session_held_elsewhere",
                   "episode " + id + " is held by backend " + claim.holder +
                       (claim.holder_at.empty() ? "" : " (" + claim.holder_at + ")") +
                       ", which is running; this backend (" + store_->instance() +
                       ") cannot answer for it; retry",
                   "episode_id")
        .with_retry_after(1);
  }
  try {
    std::shared_ptr<Session> session = replay(*snapshot, path);
    sessions_.reserve();  // 429 when full (the ownership stays here: a later request retries the restore)
    if (!sessions_.insert_restored(id, session)) return sessions_.find(id);
    metrics_.snapshot_restores->add();
    metrics_.snapshot_restore_seconds->observe(seconds_since(start));
    return session;
  } catch (const ApiError& e) {
    if (e.http_status() != 429) metrics_.snapshot_restore_failures->add();
    throw;
  }
}

std::shared_ptr<Session> EpisodeService::replay(const proto::SessionSnapshot& snap, const std::string& path) {
  const auto bad = [&](const std::string& code, const std::string& what) {
    return ApiError(500, code, "snapshot file " + path + ": " + what, "episode_id");
  };
  // The writer's configuration must be ours, or the replay would build another episode.
  const std::string& env = snap.create().env();
  if (snap.tokenizer_fingerprint() != tokenizer_->fingerprint()) {
    throw bad("bad_snapshot", "written with tokenizer fingerprint " + quote(snap.tokenizer_fingerprint()) +
                                  ", this server's is " + quote(tokenizer_->fingerprint()) +
                                  " (--tokenizer)");
  }
  if (snap.chat_template() != options_.chat_template) {
    throw bad("bad_snapshot", "written with chat template " + quote(snap.chat_template()) +
                                  ", this server's is " + quote(options_.chat_template) +
                                  " (--chat-template)");
  }
  if (snap.chat_template_variables() != options_.chat_template_variables) {
    throw bad("bad_snapshot", "written with chat template variables " +
                                  quote(snap.chat_template_variables()) + ", this server's are " +
                                  quote(options_.chat_template_variables) +
                                  " (--default-chat-template-kwargs)");
  }
  std::map<std::string, std::string> theirs(snap.server_env_params().begin(), snap.server_env_params().end());
  const auto ours = options_.env_params.find(env);
  if (theirs != (ours == options_.env_params.end() ? std::map<std::string, std::string>{} : ours->second)) {
    throw bad("bad_snapshot", "written by a server with other --env-param values for environment " +
                                  quote(env) +
                                  " (a foreign configuration: its replay would be another episode)");
  }
  auto session = std::make_shared<Session>();
  session->id = snap.episode_id();
  Built built;
  try {
    built = build_episode(snap.create());
    start_episode(built);
  } catch (const ApiError& e) {
    throw bad("bad_snapshot", "its creation request is refused by this server: " + std::string(e.what()));
  }
  session->env = env;
  session->view = built.view;
  session->task_id = built.task.id;
  session->created_unix_s = snap.created_unix_s();
  session->episode = std::move(built.episode);
  session->create = snap.create();
  session->snapshot_owner = true;  // claimed by the caller
  session->snapshot_current = true;
  session->restored = true;
  session->restored_from_turn = snap.turns();
  Session& s = *session;
  describe(s, /*full_prompt=*/true, {});  // the prompt the client held after the create
  for (int i = 0; i < snap.steps_size(); ++i) {
    try {
      apply_step(s, snap.steps(i), /*replay=*/true);
    } catch (const ApiError& e) {
      throw bad("snapshot_mismatch", "logged step " + std::to_string(i) + " (turn_id " +
                                         std::to_string(snap.steps(i).turn_id()) +
                                         ") fails on replay: " + e.what());
    }
  }
  if (s.episode->state_hash() != snap.state_hash()) {
    throw bad("snapshot_mismatch", "the replay of " + std::to_string(snap.turns()) +
                                       " turns reaches state hash " + s.episode->state_hash() +
                                       ", the snapshot says " + snap.state_hash() +
                                       " (the environment is not deterministic, or the file was edited)");
  }
  after_request(s);
  return session;
}

bool EpisodeService::write_snapshot(Session& s) {
  const auto start = std::chrono::steady_clock::now();
  try {
    if (!s.snapshot_owner) {
      // The creator's first snapshot claims generation 0 of the ownership markers.
      const SnapshotStore::Claim claim = store_->claim(s.id);
      if (!claim.claimed) {
        throw Error(store_->snapshot_path(s.id), "",
                    "the episode's ownership marker names backend " + claim.holder + ", not this one");
      }
      s.snapshot_owner = true;
    }
    proto::SessionSnapshot head;
    head.set_version(kSnapshotVersion);
    head.set_engine_version(CRL_VERSION);
    head.set_episode_id(s.id);
    *head.mutable_create() = s.create;
    if (const auto it = options_.env_params.find(s.env); it != options_.env_params.end())
      head.mutable_server_env_params()->insert(it->second.begin(), it->second.end());
    head.set_tokenizer_fingerprint(tokenizer_->fingerprint());
    head.set_chat_template(options_.chat_template);
    head.set_chat_template_variables(options_.chat_template_variables);
    head.set_turns(s.next_turn_id);
    head.set_state_hash(s.episode->state_hash());
    head.set_writer(store_->instance());
    head.set_created_unix_s(s.created_unix_s);
    head.set_restored_from_turn(s.restored_from_turn);
    // The log is the last field: its kept bytes follow the head's (protobuf merges the two).
    store_->write(s.id, head.SerializeAsString() + s.step_log);
    s.snapshot_current = true;
    metrics_.snapshot_writes->add();
    metrics_.snapshot_write_seconds->observe(seconds_since(start));
    return true;
  } catch (const std::exception& e) {
    // The step itself was applied and answered; a snapshot that could not be written leaves the previous
    // one (or none) in place. Counted and reported, since the episode is now less protected than asked.
    metrics_.snapshot_write_failures->add();
    std::cerr << "crl serve: snapshot of " << s.id << " failed: " << e.what() << std::endl;
    return false;
  }
}

size_t EpisodeService::snapshot_all() {
  if (!store_) return 0;
  size_t written = 0;
  for (const std::shared_ptr<Session>& session : sessions_.snapshot()) {
    // After the drain no request runs; one still blocked past the drain deadline keeps its lock and its
    // episode is skipped (its last periodic snapshot, if any, stays).
    std::unique_lock lock(session->mutex, std::try_to_lock);
    if (!lock.owns_lock() || session->closed || session->snapshot_current) continue;
    if (write_snapshot(*session)) ++written;
  }
  return written;
}

void EpisodeService::forget_snapshot(const std::string& id) {
  if (store_ && is_episode_id(id)) store_->remove(id);
}

}  // namespace crl::server
