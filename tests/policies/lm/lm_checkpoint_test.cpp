// policies/lm checkpoints and Adam: a saved and reloaded state continues training bit for bit, Adam lowers
// the SFT loss, and every kind of damage or mismatch is a typed error naming the file and field.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "engine/error.h"
#include "engine/file_io.h"
#include "lm_test_util.h"
#include "policies/lm/checkpoint.h"
#include "scenarios/checkpoint.h"
#include "tests/temp_dir.h"

namespace crl::lm {
namespace {

// One Adam step of SFT (actor) and a value regression toward 1 (critic) on a fixed batch; returns the loss.
float train_step(LmModel& model, LmOptimizer& opt, const PackedBatch& batch) {
  const ForwardResult f = model.forward(batch);
  std::vector<float> mask(batch.size(), 1.0f), dlogp, dvalue(batch.size());
  const float loss = sft_loss(batch, f, mask, dlogp);
  for (int t = 0; t < batch.size(); ++t) dvalue[t] = (f.values[t] - 1.0f) / batch.size();
  const std::vector<float> grad = model.backward(batch, f, dlogp, dvalue);
  opt.step_actor(model.parameters(), grad, 1e-2);
  opt.step_critic(model.parameters(), grad, 1e-2);
  return loss;
}

proto::checkpoint::Checkpoint make_checkpoint(const LmModel& model, const LmOptimizer& opt) {
  proto::checkpoint::Checkpoint ckpt;
  ckpt.set_seed(7);
  save_lm_state(model, opt, "tok-fp", *ckpt.mutable_policy());
  return ckpt;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(LmCheckpoint, AdamLowersTheSftLoss) {
  LmModel model(test::small_config(false));
  model.initialize(1);
  LmOptimizer opt(model.layout());
  const PackedBatch batch = test::make_batch(model.config(), {9, 12, 5});
  const float first = train_step(model, opt, batch);
  float last = first;
  for (int i = 0; i < 30; ++i) last = train_step(model, opt, batch);
  EXPECT_LT(last, 0.5f * first) << first << " -> " << last;
  EXPECT_EQ(opt.actor().steps(), 31);
  EXPECT_NE(model.parameters()[model.layout().value_b()], 0.0f);  // the critic moved too
}

TEST(LmCheckpoint, ReloadedStateContinuesBitForBit) {
  const crl::test::TempDir dir;
  LmModel model(test::small_config(false));
  model.initialize(2);
  LmOptimizer opt(model.layout());
  const PackedBatch batch = test::make_batch(model.config(), {8, 11});
  for (int i = 0; i < 3; ++i) train_step(model, opt, batch);
  const std::string path = dir.file("lm.ckpt");
  scenarios::write_checkpoint(path, make_checkpoint(model, opt));
  // Same state, same bytes.
  EXPECT_EQ(read_file(path), scenarios::encode_checkpoint(make_checkpoint(model, opt)));

  LmCheckpoint loaded = load_lm_state(scenarios::read_checkpoint(path).policy(), path);
  EXPECT_EQ(loaded.tokenizer_fingerprint, "tok-fp");
  EXPECT_EQ(loaded.model.config().d_ff, model.config().d_ff);
  EXPECT_EQ(loaded.model.parameters(), model.parameters());
  EXPECT_EQ(loaded.optimizer.actor().steps(), 3);
  EXPECT_EQ(loaded.optimizer.critic().second_moment(), opt.critic().second_moment());
  for (int i = 0; i < 2; ++i) {
    train_step(model, opt, batch);
    train_step(loaded.model, loaded.optimizer, batch);
  }
  EXPECT_EQ(loaded.model.parameters(), model.parameters());  // Adam's moments and step count came back
}

// The position scheme is part of the model: a rope model comes back as one (and gives the same logits).
TEST(LmCheckpoint, RopeSurvivesTheRoundTrip) {
  LmConfig c = test::small_config(false);
  c.rope = true;
  LmModel model(c);
  model.initialize(4);
  LmOptimizer opt(model.layout());
  const auto ckpt = make_checkpoint(model, opt);
  EXPECT_NE(ckpt.policy().shape().find("rope"), std::string::npos) << ckpt.policy().shape();
  const LmCheckpoint loaded = load_lm_state(ckpt.policy(), "mem");
  EXPECT_TRUE(loaded.model.config().rope);
  const PackedBatch batch = test::make_batch(c, {9});
  EXPECT_EQ(loaded.model.forward(batch).logp, model.forward(batch).logp);
}

TEST(LmCheckpoint, DamageAndMismatchesAreTypedErrors) {
  const crl::test::TempDir dir;
  LmModel model(test::small_config());
  model.initialize(3);
  const LmOptimizer opt(model.layout());
  const auto good = make_checkpoint(model, opt);
  const std::string path = dir.file("lm.ckpt");
  scenarios::write_checkpoint(path, good);
  std::string bytes = read_file(path);

  // Bytes: a flipped bit, a cut file.
  std::string flipped = bytes;
  flipped[flipped.size() - 10] ^= 0x04;
  EXPECT_NE(error_of([&] { scenarios::decode_checkpoint(flipped, path); }).find("SHA-256"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              scenarios::decode_checkpoint(bytes.substr(0, bytes.size() / 2), path);
            }).find("truncated"),
            std::string::npos);

  auto load_modified = [&](const std::function<void(proto::checkpoint::PolicyState&)>& change) {
    proto::checkpoint::PolicyState state = good.policy();
    change(state);
    return error_of([&] { load_lm_state(state, "x.ckpt"); });
  };
  EXPECT_NE(load_modified([](auto& s) { s.set_type("neural"); }).find("policy.type"), std::string::npos);
  EXPECT_NE(load_modified([](auto& s) {
              s.mutable_lm()->mutable_config()->set_heads(3);
            }).find("heads must divide"),
            std::string::npos);
  EXPECT_NE(load_modified([](auto& s) { s.mutable_lm()->mutable_config()->set_vocab(0); }).find("vocab"),
            std::string::npos);
  EXPECT_NE(
      load_modified([](auto& s) { s.mutable_lm()->mutable_config()->set_d_model(1 << 20); }).find("2^30"),
      std::string::npos);
  EXPECT_NE(load_modified([](auto& s) {
              s.mutable_lm()->mutable_parameters()->RemoveLast();
            }).find("policy.lm.parameters"),
            std::string::npos);
  EXPECT_NE(load_modified([](auto& s) {
              s.mutable_lm()->set_parameters(5, std::numeric_limits<float>::quiet_NaN());
            }).find("parameter 5 is not finite"),
            std::string::npos);
  EXPECT_NE(load_modified([](auto& s) {
              s.mutable_lm()->mutable_actor_adam()->mutable_v()->RemoveLast();
            }).find("policy.lm.actor_adam"),
            std::string::npos);
  EXPECT_NE(load_modified([](auto& s) {
              s.mutable_lm()->mutable_critic_adam()->set_steps(-1);
            }).find("policy.lm.critic_adam"),
            std::string::npos);
  EXPECT_NE(load_modified([](auto& s) { s.mutable_lm()->clear_config(); }).find("policy.lm.config"),
            std::string::npos);
  EXPECT_EQ(load_modified([](auto&) {}), "no error");
}

}  // namespace
}  // namespace crl::lm
