// Session snapshots and restore (`crl serve --snapshot-dir`, issue 19 item 2) without sockets: several
// EpisodeService instances share one directory, each standing for one backend of a fleet; destroying one is
// its death (its liveness lock goes with it, as with SIGKILL). An episode restored on another backend
// continues with the same state hashes and ends with an export byte-identical to an uninterrupted run; steps
// after the last periodic snapshot are reported lost (409 steps_lost, restored_from_turn), never silently
// replayed differently; an episode with no snapshot is session_lost; an episode whose holder lives is
// session_held_elsewhere; hostile snapshot files get typed errors naming the file; of two backends restoring
// one episode at once exactly one wins; DELETE and the reaper remove the files; the metrics count it all.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <thread>

#include "server/episode_service.h"
#include "server/snapshot_store.h"
#include "tests/server/expect_api_error.h"
#include "tests/temp_dir.h"
#include "wire/api_error.h"
#include "wire/wire_codec.h"

namespace crl::server {
namespace {

using testing::expect_error;
using wire::ApiError;
using wire::encode_message;
using wire::WireFormat;

proto::CreateEpisodeRequest chain_request(uint64_t seed = 7) {
  proto::CreateEpisodeRequest r;
  r.set_env("memory_chain");
  r.set_task_id("chain-1");
  r.set_seed(seed);
  r.mutable_budget()->set_capacity(2560);
  r.mutable_budget()->set_reserve(768);
  return r;
}

ServiceOptions backend(const std::string& dir, const std::string& tag, uint32_t every = 0) {
  ServiceOptions o;
  o.snapshot_dir = dir;
  o.backend_tag = tag;
  o.snapshot_every = every;
  o.idle_timeout_s = 600;
  return o;
}

// The scripted client of a memory-chain episode: the next step for the last answer (the fact read from the
// first prompt).
proto::StepRequest next_step(const proto::StepResponse& r, char fact) {
  proto::StepRequest s;
  s.set_turn_id(r.next_turn_id());
  std::string text = "continue", kind = "assistant";
  if (r.kind() == "compaction_request") {
    kind = "summary";
    text = std::string("FACT ") + fact;
  } else if (r.prompt_text().find("QUESTION") != std::string::npos ||
             r.append_text().find("QUESTION") != std::string::npos) {
    text = std::string("answer ") + fact;
  }
  s.mutable_action()->set_kind(kind);
  s.mutable_action()->set_text(text);
  return s;
}

char fact_of(const proto::StepResponse& created) {
  const std::string& p = created.prompt_text();
  return p[p.rfind("FACT ") + 5];
}

// An export as JSON bytes with the episode id replaced (two runs of one episode on two servers differ there).
std::string export_bytes(EpisodeService& service, const std::string& id) {
  std::string json = encode_message(service.export_segments(id), WireFormat::kJson);
  for (size_t at = json.find(id); at != std::string::npos; at = json.find(id, at))
    json.replace(at, id.size(), "ID");
  return json;
}

// The uninterrupted run: every state hash and the export.
struct Reference {
  std::vector<std::string> hashes;
  std::string exported;
};
Reference reference_run(uint64_t seed) {
  EpisodeService service({});
  proto::StepResponse r = service.create(chain_request(seed));
  const char fact = fact_of(r);
  Reference ref{{r.state_hash()}, ""};
  while (r.kind() != "done") {
    r = service.step(r.episode_id(), next_step(r, fact));
    ref.hashes.push_back(r.state_hash());
  }
  ref.exported = export_bytes(service, r.episode_id());
  return ref;
}

TEST(Snapshot, DrainedEpisodeRestoresElsewhereAndExportsByteIdentical) {
  const test::TempDir dir;
  const Reference ref = reference_run(7);
  auto a = std::make_unique<EpisodeService>(backend(dir.str(), "b0"));
  proto::StepResponse r = a->create(chain_request(7));
  const std::string id = r.episode_id();
  const char fact = fact_of(r);
  proto::StepRequest last;
  for (int i = 0; i < 30; ++i) {  // past the first compaction (a rebuilt context is replayed too)
    last = next_step(r, fact);
    r = a->step(id, last);
    ASSERT_EQ(r.state_hash(), ref.hashes[i + 1]);
  }
  const std::string last_answer = encode_message(r, WireFormat::kProtobuf);
  EXPECT_EQ(a->snapshot_all(), 1u);  // the drain
  EXPECT_TRUE(std::filesystem::exists(dir.file(id + ".snap")));
  a.reset();  // the process exits

  EpisodeService b(backend(dir.str(), "b1"));
  // A retry of the last acknowledged turn gets the very answer the drained backend gave.
  EXPECT_EQ(encode_message(b.step(id, last), WireFormat::kProtobuf), last_answer);
  const proto::EpisodeState state = b.state(id);
  EXPECT_TRUE(state.restored());
  EXPECT_EQ(state.restored_from_turn(), 30u);
  EXPECT_EQ(state.current().state_hash(), ref.hashes[30]);
  size_t turn = 30;
  while (r.kind() != "done") {
    r = b.step(id, next_step(r, fact));
    ASSERT_EQ(r.state_hash(), ref.hashes[++turn]) << "turn " << turn;
  }
  EXPECT_EQ(turn + 1, ref.hashes.size());
  EXPECT_EQ(export_bytes(b, id), ref.exported);
  EXPECT_EQ(b.metrics().snapshot_restores->value(), 1u);
}

TEST(Snapshot, KilledBackendLosesOnlyTheStepsAfterItsLastPeriodicSnapshotAndSaysSo) {
  const test::TempDir dir;
  const Reference ref = reference_run(9);
  auto a = std::make_unique<EpisodeService>(backend(dir.str(), "b0", /*every=*/4));
  proto::StepResponse r = a->create(chain_request(9));
  const std::string id = r.episode_id();
  const char fact = fact_of(r);
  std::vector<proto::StepResponse> answers{r};
  for (int i = 0; i < 7; ++i) answers.push_back(r = a->step(id, next_step(r, fact)));
  EXPECT_EQ(a->metrics().snapshot_writes->value(), 1u);  // after turn 4
  a.reset();  // SIGKILL: no drain, turns 5 .. 7 were acknowledged but never snapshotted

  EpisodeService b(backend(dir.str(), "b1"));
  const ApiError lost = expect_error([&] { b.step(id, next_step(r, fact)); }, 409, "steps_lost");
  EXPECT_NE(std::string(lost.what()).find("resume with turn_id 4"), std::string::npos) << lost.what();
  const proto::EpisodeState state = b.state(id);
  EXPECT_TRUE(state.restored());
  EXPECT_EQ(state.restored_from_turn(), 4u);
  EXPECT_EQ(state.current().next_turn_id(), 4u);
  EXPECT_EQ(state.current().state_hash(), ref.hashes[4]);
  // Resumed from turn 4, the episode is the uninterrupted one (and a turn_id off later is a plain
  // bad_turn_id: nothing was lost since).
  r = answers[4];
  r = b.step(id, next_step(r, fact));
  proto::StepRequest far = next_step(r, fact);
  far.set_turn_id(far.turn_id() + 3);
  expect_error([&] { b.step(id, far); }, 409, "bad_turn_id");
  size_t turn = 5;
  ASSERT_EQ(r.state_hash(), ref.hashes[5]);
  while (r.kind() != "done") {
    r = b.step(id, next_step(r, fact));
    ASSERT_EQ(r.state_hash(), ref.hashes[++turn]);
  }
  EXPECT_EQ(export_bytes(b, id), ref.exported);
}

TEST(Snapshot, EpisodeWithoutSnapshotIsLostWhenItsBackendIsGoneAndHeldWhileItLives) {
  const test::TempDir dir;
  auto a = std::make_unique<EpisodeService>(backend(dir.str(), "b0", /*every=*/50));
  proto::StepResponse r = a->create(chain_request());
  const std::string id = r.episode_id();
  r = a->step(id, next_step(r, fact_of(r)));
  EpisodeService b(backend(dir.str(), "b1"));
  // b0 lives: b1 does not answer for its episode, and says who does.
  const ApiError held = expect_error([&] { b.state(id); }, 503, "session_held_elsewhere");
  EXPECT_EQ(held.retry_after(), 1);
  EXPECT_NE(std::string(held.what()).find("b0."), std::string::npos) << held.what();
  a->snapshot_all();
  expect_error([&] { b.state(id); }, 503, "session_held_elsewhere");  // snapshot written, b0 still alive

  const std::string unsnapshotted = a->create(chain_request(8)).episode_id();
  a.reset();
  const ApiError lost = expect_error([&] { b.state(unsnapshotted); }, 503, "session_lost");
  EXPECT_NE(std::string(lost.what()).find(unsnapshotted), std::string::npos);
  EXPECT_NE(std::string(lost.what()).find("backend b0"), std::string::npos);
  EXPECT_EQ(b.state(id).current().next_turn_id(), 1u);  // the snapshotted one restores
  // Ids of this backend's own tag and untagged ids are unknown, as without snapshots.
  expect_error([&] { b.state("ep-b1-" + std::string(32, '0')); }, 404, "unknown_episode");
  expect_error([&] { b.state("ep-" + std::string(32, '0')); }, 404, "unknown_episode");
}

// Writes the snapshot of a fresh episode (3 steps) in `dir` and returns its id; the writer is gone after.
std::string snapshotted_episode(const std::string& dir, ServiceOptions options = {}) {
  options.snapshot_dir = dir;
  options.backend_tag = "b0";
  EpisodeService a(options);
  proto::StepResponse r = a.create(chain_request());
  const char fact = fact_of(r);
  for (int i = 0; i < 3; ++i) r = a.step(r.episode_id(), next_step(r, fact));
  a.snapshot_all();
  return r.episode_id();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Expects restoring `id` on a fresh backend to fail with `code` and a message naming the file and `words`.
void expect_refused(const std::string& dir, const std::string& id, const std::string& code,
                    const std::string& words, ServiceOptions options = {}) {
  options.snapshot_dir = dir;
  options.backend_tag = "b1";
  EpisodeService b(options);
  const ApiError e = expect_error([&] { b.state(id); }, 500, code);
  EXPECT_NE(std::string(e.what()).find(dir + "/" + id + ".snap"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  EXPECT_EQ(b.metrics().snapshot_restore_failures->value(), 1u);
  EXPECT_EQ(b.sessions().size(), 0u);
}

TEST(Snapshot, HostileFilesGetTypedErrorsNamingTheFile) {
  const test::TempDir dir;
  const std::string id = snapshotted_episode(dir.str());
  const std::string path = dir.file(id + ".snap");
  const std::string good = read_file(path);
  const SnapshotStore writer(dir.str(), "w", "test");  // writes well-framed files with chosen payloads

  write_file(path, good.substr(0, good.size() - 7));
  expect_refused(dir.str(), id, "bad_snapshot", "truncated");
  write_file(path, good.substr(0, 20));
  expect_refused(dir.str(), id, "bad_snapshot", "shorter than the 52-byte header");
  write_file(path, "");
  expect_refused(dir.str(), id, "bad_snapshot", "truncated");
  std::string version = good;
  version[8] = 9;
  write_file(path, version);
  expect_refused(dir.str(), id, "bad_snapshot", "format version 9");
  std::string magic = good;
  magic[0] = 'X';
  write_file(path, magic);
  expect_refused(dir.str(), id, "bad_snapshot", "not a crl snapshot");
  std::string flipped = good;
  flipped[flipped.size() / 2 + 30] ^= 0x20;
  write_file(path, flipped);
  expect_refused(dir.str(), id, "bad_snapshot", "SHA-256");
  writer.write(id, "\xff\xff\xff garbage");
  expect_refused(dir.str(), id, "bad_snapshot", "not a SessionSnapshot");

  proto::SessionSnapshot snap;
  ASSERT_TRUE(snap.ParseFromString(good.substr(52)));
  const auto rewrite = [&](const std::function<void(proto::SessionSnapshot&)>& edit) {
    proto::SessionSnapshot edited = snap;
    edit(edited);
    writer.write(id, edited.SerializeAsString());
  };
  rewrite([&](auto& s) { s.set_episode_id("ep-b0-" + std::string(32, 'a')); });
  expect_refused(dir.str(), id, "bad_snapshot", "it holds episode");
  rewrite([](auto& s) { s.mutable_create()->set_env("no_such_env"); });
  expect_refused(dir.str(), id, "bad_snapshot", "no_such_env");
  rewrite([](auto& s) { s.set_chat_template("plain"); });
  expect_refused(dir.str(), id, "bad_snapshot", "chat template");
  rewrite([](auto& s) { s.set_chat_template_variables(R"({"enable_thinking":false})"); });
  expect_refused(dir.str(), id, "bad_snapshot", "--default-chat-template-kwargs");
  rewrite([](auto& s) { (*s.mutable_server_env_params())["length"] = "3"; });
  expect_refused(dir.str(), id, "bad_snapshot", "--env-param");
  rewrite([](auto& s) { s.set_tokenizer_fingerprint("other"); });
  expect_refused(dir.str(), id, "bad_snapshot", "tokenizer fingerprint");
  rewrite([](auto& s) { s.set_turns(2); });
  expect_refused(dir.str(), id, "bad_snapshot", "announces 2 turns but logs 3");
  rewrite([](auto& s) { s.set_state_hash(std::string(32, '0')); });
  expect_refused(dir.str(), id, "snapshot_mismatch", "state hash");
  rewrite([](auto& s) { s.mutable_steps(1)->mutable_action()->set_text("something else"); });
  expect_refused(dir.str(), id, "snapshot_mismatch", "state hash");
  rewrite([](auto& s) { s.mutable_steps(2)->set_turn_id(7); });
  expect_refused(dir.str(), id, "snapshot_mismatch", "logged step 2 (turn_id 7)");
  rewrite([](auto& s) { s.mutable_steps(0)->mutable_action()->set_kind("summary"); });
  expect_refused(dir.str(), id, "snapshot_mismatch", "logged step 0");
  std::filesystem::remove(path);
  std::filesystem::create_directory(path);
  expect_refused(dir.str(), id, "bad_snapshot", "cannot read");

  // Ids that are not episode ids never become paths.
  EpisodeService b(backend(dir.str(), "b1"));
  write_file(dir.file("x.snap"), good);
  for (const std::string& bad :
       std::vector<std::string>{"../x", "x", "ep-../../x", "ep-b0-" + std::string(31, 'a') + "/",
                                "ep-B0-" + std::string(32, 'a')}) {
    expect_error([&] { b.state(bad); }, 404, "unknown_episode");
  }
}

TEST(Snapshot, OfTwoBackendsRestoringOneEpisodeAtOnceExactlyOneWins) {
  const test::TempDir dir;
  std::vector<std::string> ids;
  {
    EpisodeService a(backend(dir.str(), "b0"));
    for (uint64_t seed = 0; seed < 12; ++seed) {
      proto::StepResponse r = a.create(chain_request(seed));
      r = a.step(r.episode_id(), next_step(r, fact_of(r)));
      ids.push_back(r.episode_id());
    }
    EXPECT_EQ(a.snapshot_all(), ids.size());
  }
  EpisodeService b(backend(dir.str(), "b1")), c(backend(dir.str(), "b2"));
  for (const std::string& id : ids) {
    std::atomic<int> ready{0};
    int won[2] = {0, 0}, held[2] = {0, 0};
    auto contender = [&](EpisodeService& s, int k) {
      ready.fetch_add(1);
      while (ready.load() < 2) {
      }
      try {
        s.state(id);
        won[k] = 1;
      } catch (const ApiError& e) {
        if (e.code() == "session_held_elsewhere") held[k] = 1;
      }
    };
    std::thread tb(contender, std::ref(b), 0), tc(contender, std::ref(c), 1);
    tb.join();
    tc.join();
    EXPECT_EQ(won[0] + won[1], 1) << id;
    EXPECT_EQ(held[0] + held[1], 1) << id;
    // The loser keeps saying so; the winner answers.
    EpisodeService& winner = won[0] ? b : c;
    EpisodeService& loser = won[0] ? c : b;
    expect_error([&] { loser.state(id); }, 503, "session_held_elsewhere");
    EXPECT_EQ(winner.state(id).current().next_turn_id(), 1u);
    EXPECT_TRUE(std::filesystem::exists(dir.file(id + ".owner.1")));
    EXPECT_FALSE(std::filesystem::exists(dir.file(id + ".owner.2")));
  }
  EXPECT_EQ(b.metrics().snapshot_restores->value() + c.metrics().snapshot_restores->value(), ids.size());
}

TEST(Snapshot, DeleteAndTheReaperRemoveTheFiles) {
  const test::TempDir dir;
  ServiceOptions options = backend(dir.str(), "b0", 1);
  options.idle_timeout_s = 0.01;
  EpisodeService a(options);
  proto::StepResponse r = a.create(chain_request());
  const std::string deleted = r.episode_id();
  a.step(deleted, next_step(r, fact_of(r)));
  r = a.create(chain_request(8));
  const std::string reaped = r.episode_id();
  a.step(reaped, next_step(r, fact_of(r)));
  EXPECT_TRUE(std::filesystem::exists(dir.file(deleted + ".snap")));
  EXPECT_TRUE(std::filesystem::exists(dir.file(deleted + ".owner.0")));
  a.remove(deleted);
  EXPECT_FALSE(std::filesystem::exists(dir.file(deleted + ".snap")));
  EXPECT_FALSE(std::filesystem::exists(dir.file(deleted + ".owner.0")));
  while (a.reap_idle() == 0) std::this_thread::yield();  // the 10 ms idle timeout passes
  EXPECT_FALSE(std::filesystem::exists(dir.file(reaped + ".snap")));
  // A deleted episode is not restored by anyone.
  expect_error([&] { a.state(deleted); }, 404, "unknown_episode");
}

TEST(Snapshot, MetricsCountWritesRestoresAndFailures) {
  const test::TempDir dir;
  std::string id;
  {
    EpisodeService a(backend(dir.str(), "b0", 2));
    proto::StepResponse r = a.create(chain_request());
    id = r.episode_id();
    const char fact = fact_of(r);
    for (int i = 0; i < 4; ++i) r = a.step(id, next_step(r, fact));
    const std::string text = a.metrics().render();
    EXPECT_NE(text.find("crl_snapshot_writes_total 2\n"), std::string::npos) << text;
    EXPECT_NE(text.find("crl_snapshot_write_duration_seconds_count 2\n"), std::string::npos);
  }
  EpisodeService b(backend(dir.str(), "b1"));
  b.state(id);
  const std::string text = b.metrics().render();
  EXPECT_NE(text.find("crl_snapshot_restores_total 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("crl_snapshot_restore_failures_total 0\n"), std::string::npos);
  EXPECT_NE(text.find("crl_snapshot_restore_duration_seconds_count 1\n"), std::string::npos);
}

}  // namespace
}  // namespace crl::server
