// `crl serve --backend-tag` (issue 19 item 1): every episode id carries the tag ("ep-TAG-<32 hex>", still 128
// random bits after it) so that HAProxy routes a path naming an episode to its server; bad tags are refused.
#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "engine/error.h"
#include "server/episode_service.h"
#include "wire/wire_codec.h"

namespace crl::server {
namespace {

proto::CreateEpisodeRequest create_request() {
  proto::CreateEpisodeRequest r;
  wire::decode_message(R"({"env":"memory_chain","task_id":"h1","seed":3})", wire::WireFormat::kJson, r);
  return r;
}

TEST(BackendTag, IdsCarryTheTagThenRandomHex) {
  ServiceOptions options;
  options.backend_tag = "b7";
  EpisodeService service(options);
  const std::regex form("ep-b7-[0-9a-f]{32}");
  std::set<std::string> ids;
  for (int i = 0; i < 8; ++i) {
    const std::string id = service.create(create_request()).episode_id();
    EXPECT_TRUE(std::regex_match(id, form)) << id;
    ids.insert(id);
    EXPECT_EQ(service.state(id).episode_id(), id);
  }
  EXPECT_EQ(ids.size(), 8u);
  EpisodeService untagged{ServiceOptions{}};
  EXPECT_TRUE(
      std::regex_match(untagged.create(create_request()).episode_id(), std::regex("ep-[0-9a-f]{32}")));
}

TEST(BackendTag, BadTagsAreRefusedNamingTheOption) {
  for (const std::string tag : {"B1", "a-b", "a_b", "a/b", "12345678901234567", "x y"}) {
    ServiceOptions options;
    options.backend_tag = tag;
    try {
      EpisodeService service(options);
      ADD_FAILURE() << "tag " << tag << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--backend-tag"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace crl::server
