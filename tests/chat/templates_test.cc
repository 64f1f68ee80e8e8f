// Every real template fixture x conversation x option set in cases.json renders exactly the
// string in expected/<case>.txt (or fails with the expected message). Set
// GB_CHAT_UPDATE_EXPECTED=1 to rewrite the expected files after reviewing a change.
#include <gtest/gtest.h>

#include <cstdlib>

#include "case_support.h"

namespace gb::chat {
namespace {

using testing::Case;

const std::string kDir = GB_CHAT_TEST_DIR;

class TemplateCase : public ::testing::TestWithParam<Case> {};

TEST_P(TemplateCase, RendersExpected) {
  const Case& c = GetParam();
  std::string out;
  const bool ok = testing::render_case(kDir, c.spec, out);
  if (c.spec.contains("expect_error")) {
    ASSERT_FALSE(ok) << "expected an error, rendered:\n" << out;
    EXPECT_NE(out.find(c.spec["expect_error"].get<std::string>()), std::string::npos) << out;
    return;
  }
  ASSERT_TRUE(ok) << out;
  const std::string path = kDir + "/expected/" + c.name + ".txt";
  if (std::getenv("GB_CHAT_UPDATE_EXPECTED") != nullptr) {
    std::ofstream(path, std::ios::binary) << out;
  }
  const std::string want = testing::read_file(path);
  EXPECT_EQ(out, want) << "case " << c.name;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string n;
  for (char ch : info.param.name) n += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Real, TemplateCase, ::testing::ValuesIn(testing::load_cases(kDir)), case_name);

TEST(TemplateCases, ManifestLoaded) { EXPECT_GE(testing::load_cases(kDir).size(), 90u); }

}  // namespace
}  // namespace gb::chat
