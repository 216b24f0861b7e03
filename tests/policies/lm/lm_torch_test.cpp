// policies/lm against an independent PyTorch implementation (tests/policies/lm/torch_reference.py, run by
// /usr/bin/python3 with Debian's python3-torch; skips with a message where `import torch` fails).
// The reference runs in float64, so the tolerance measures this float32 code's own error.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "lm_test_util.h"
#include "tests/temp_dir.h"

namespace crl::lm {
namespace {

struct Reference {
  std::vector<float> logits, logp, values, grad;
  double loss = 0.0;
};

void write_floats(const std::string& path, const std::vector<float>& v) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
}

std::vector<float> read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const auto bytes = static_cast<size_t>(in.tellg());
  std::vector<float> v(bytes / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(bytes));
  return v;
}

// Runs the reference; nullopt (with `why`) when torch is missing.
std::optional<Reference> run_reference(const LmModel& m, const PackedBatch& b, const test::LossInputs& in,
                                       const crl::test::TempDir& dir, std::string& why) {
  const LmConfig& c = m.config();
  nlohmann::json cfg = {{"vocab", c.vocab},       {"d_model", c.d_model},
                        {"heads", c.heads},       {"layers", c.layers},
                        {"d_ff", c.d_ff},         {"max_positions", c.max_positions},
                        {"norm_eps", c.norm_eps}, {"value_grad_to_trunk", c.value_grad_to_trunk}};
  dir.write("config.json", cfg.dump());
  nlohmann::json batch = {{"tokens", b.tokens}, {"targets", b.targets},    {"offsets", b.offsets},
                          {"mask", in.mask},    {"rl_dlogp", in.rl_dlogp}, {"dvalue", in.dvalue}};
  dir.write("batch.json", batch.dump());
  write_floats(dir.file("params.bin"), m.parameters());
  const std::string cmd = "/usr/bin/python3 " CRL_SOURCE_DIR "/tests/policies/lm/torch_reference.py " +
                          dir.str() + " 2>" + dir.file("stderr.txt");
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    std::ifstream err(dir.file("stderr.txt"));
    std::stringstream ss;
    ss << err.rdbuf();
    const int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    why = "reference exited with code " + std::to_string(code) + ": " + ss.str();
    // Exit code 3 = torch cannot be imported (skip); anything else is a broken reference (fail).
    if (code != 3) ADD_FAILURE() << why;
    return std::nullopt;
  }
  Reference r;
  r.logits = read_floats(dir.file("logits.bin"));
  r.logp = read_floats(dir.file("logp.bin"));
  r.values = read_floats(dir.file("values.bin"));
  r.grad = read_floats(dir.file("grad.bin"));
  std::ifstream out(dir.file("out.json"));
  r.loss = nlohmann::json::parse(out).at("loss").get<double>();
  return r;
}

class LmTorchTest : public ::testing::TestWithParam<bool> {};

TEST_P(LmTorchTest, ForwardLossAndEveryGradientMatchPyTorch) {
  const LmConfig c = test::small_config(GetParam());
  const LmModel m = test::perturbed_model(c);
  const PackedBatch b = test::make_batch(c, {5, 0, 1, 11, 7, 16});
  const test::LossInputs in = test::make_loss_inputs(b.size());
  crl::test::TempDir dir;
  std::string why;
  const std::optional<Reference> ref = run_reference(m, b, in, dir, why);
  if (!ref) GTEST_SKIP() << "PyTorch reference unavailable (install python3-torch): " << why;

  const ForwardResult f = m.forward(b);
  std::vector<float> dlogp;
  const double loss = test::test_loss(b, f, in, dlogp);
  const std::vector<float> grad = m.backward(b, f, dlogp, in.dvalue);

  ASSERT_EQ(ref->logits.size(), static_cast<size_t>(f.logits.size()));
  ASSERT_EQ(ref->grad.size(), grad.size());
  constexpr double kRel = 1e-4;
  std::string first;
  EXPECT_EQ(test::mismatches("logits", f.logits.data(), ref->logits.data(), ref->logits.size(), kRel, &first),
            0)
      << first;
  EXPECT_EQ(test::mismatches("logp", f.logp.data(), ref->logp.data(), ref->logp.size(), kRel, &first), 0)
      << first;
  EXPECT_EQ(test::mismatches("values", f.values.data(), ref->values.data(), ref->values.size(), kRel, &first),
            0)
      << first;
  EXPECT_NEAR(loss, ref->loss, kRel * std::abs(ref->loss) + 1e-6);

  // Every tensor of the layout separately, so that a small tensor's error is not hidden by a large one's.
  double total_abs = 0.0;
  for (const auto& [name, range] : test::named_tensors(c, m.layout())) {
    const auto [begin, end] = range;
    EXPECT_EQ(
        test::mismatches(name, grad.data() + begin, ref->grad.data() + begin, end - begin, kRel, &first), 0)
        << first;
    for (int64_t i = begin; i < end; ++i) total_abs += std::abs(ref->grad[i]);
    if (name.find("wqkv") != std::string::npos || name == "pos_emb") {
      double tensor_abs = 0.0;
      for (int64_t i = begin; i < end; ++i) tensor_abs += std::abs(ref->grad[i]);
      EXPECT_GT(tensor_abs, 0.0) << name << " has no gradient: the comparison would be vacuous";
    }
  }
  EXPECT_GT(total_abs, 0.0);
}

INSTANTIATE_TEST_SUITE_P(ValueHead, LmTorchTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "SharedTrunk" : "DetachedValue"; });

// The comparison can fail: the same reference against a model whose one final-norm gain moved by 1%
// reports mismatches in the logits.
TEST(LmTorchCheck, ComparisonDetectsASmallDifference) {
  const LmConfig c = test::small_config();
  const LmModel m = test::perturbed_model(c);
  const PackedBatch b = test::make_batch(c, {9, 4});
  const test::LossInputs in = test::make_loss_inputs(b.size());
  crl::test::TempDir dir;
  std::string why;
  const std::optional<Reference> ref = run_reference(m, b, in, dir, why);
  if (!ref) GTEST_SKIP() << "PyTorch reference unavailable (install python3-torch): " << why;
  LmModel moved = m;
  moved.parameters()[m.layout().norm_f() + 3] *= 1.01f;
  const ForwardResult f = moved.forward(b);
  EXPECT_GT(test::mismatches("logits", f.logits.data(), ref->logits.data(), ref->logits.size(), 1e-4), 0);
}

// Where `import torch` fails the reference exits 3 and the tests skip with the reason (a fake torch module
// that raises ImportError stands in for a machine without python3-torch).
TEST(LmTorchCheck, MissingTorchGivesASkipWithTheReason) {
  crl::test::TempDir fake("fake_torch");
  fake.write("torch.py", "raise ImportError('no torch on this machine')\n");
  const char* old = std::getenv("PYTHONPATH");
  const std::string keep = old != nullptr ? old : "";
  ::setenv("PYTHONPATH", fake.str().c_str(), 1);
  const LmConfig c = test::small_config();
  const LmModel m = test::perturbed_model(c);
  const PackedBatch b = test::make_batch(c, {3});
  crl::test::TempDir dir;
  std::string why;
  const std::optional<Reference> ref = run_reference(m, b, test::make_loss_inputs(b.size()), dir, why);
  if (old != nullptr) {
    ::setenv("PYTHONPATH", keep.c_str(), 1);
  } else {
    ::unsetenv("PYTHONPATH");
  }
  EXPECT_FALSE(ref.has_value());
  EXPECT_NE(why.find("code 3"), std::string::npos) << why;
  EXPECT_NE(why.find("no torch on this machine"), std::string::npos) << why;
}

}  // namespace
}  // namespace crl::lm
