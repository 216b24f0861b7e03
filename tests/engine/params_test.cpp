#include "engine/params.h"

#include <gtest/gtest.h>

#include "engine/error.h"

namespace crl {
namespace {

const std::vector<ParamSpec> kSpecs = {{"length", ParamType::kInt, "96", ""},
                                       {"rate", ParamType::kDouble, "0.5", ""},
                                       {"on", ParamType::kBool, "true", ""},
                                       {"name", ParamType::kString, "x", ""}};

TEST(Params, DefaultsAndTypedValues) {
  const Params p = Params::resolve(kSpecs, {{"length", "12"}, {"rate", "1e-3"}, {"on", "false"}}, "env");
  EXPECT_EQ(p.get_int("length"), 12);
  EXPECT_DOUBLE_EQ(p.get_double("rate"), 1e-3);
  EXPECT_FALSE(p.get_bool("on"));
  EXPECT_EQ(p.get_string("name"), "x");
}

TEST(Params, UnknownAndMistypedValuesAreErrorsNamingTheField) {
  try {
    Params::resolve(kSpecs, {{"lenght", "12"}}, "environment \"memory_chain\"");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "lenght");
    EXPECT_NE(std::string(e.what()).find("known: length"), std::string::npos) << e.what();
  }
  for (auto [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"length", "1.5"}, {"length", ""}, {"rate", "abc"}, {"on", "yes"}, {"length", "12x"}}) {
    try {
      Params::resolve(kSpecs, {{name, value}}, "env");
      FAIL() << name << "=" << value;
    } catch (const Error& e) {
      EXPECT_EQ(e.field(), name);
      EXPECT_NE(std::string(e.what()).find('"' + value + '"'), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace crl
