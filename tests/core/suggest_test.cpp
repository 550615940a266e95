// "Did you mean" hints: edit distances and the nearest candidate.
#include <gtest/gtest.h>

#include "base/suggest.h"

namespace memwall {
namespace {

TEST(Suggest, EditDistanceCountsInsertionsDeletionsSubstitutionsAndSwaps) {
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("stgae", "stage"), 1u);  // two neighbours swapped: one edit
  EXPECT_EQ(edit_distance("GPT2", "gpt2"), 0u);
  EXPECT_EQ(edit_distance("zero_optimizaton", "zero_optimization"), 1u);
}

TEST(Suggest, ClosestNameIsANearTypoOrTheOnlyLongerName) {
  const std::vector<std::string> keys = {"zero_optimization", "train_micro_batch_size_per_gpu", "fp16",
                                         "bf16"};
  EXPECT_EQ(closest_name("zero_optimizaton", keys), "zero_optimization");
  EXPECT_EQ(closest_name("train_micro_batch", keys), "train_micro_batch_size_per_gpu");  // the only prefix
  EXPECT_EQ(closest_name("zero_optimization", keys), "");                                // not a typo
  EXPECT_EQ(closest_name("optimizer", keys), "");                                        // too far
  EXPECT_EQ(closest_name("fp32", keys), "");  // fp16 is two edits away: half of its four characters
  EXPECT_EQ(closest_name("fp61", keys), "fp16");
}

TEST(Suggest, NoGuessWhenTwoAreEquallyNear) {
  EXPECT_EQ(closest_name("gpt", {"gpt2", "gpt3"}), "");
  EXPECT_EQ(closest_name("gpt2-x", {"gpt2-xl", "gpt2-large"}), "gpt2-xl");
  EXPECT_EQ(closest_name("GPT2", {"gpt2", "gpt3"}), "gpt2");  // the case alone differs: zero edits
  EXPECT_EQ(did_you_mean("hardwre", {"hardware", "model"}), " (did you mean 'hardware'?)");
  EXPECT_EQ(did_you_mean("x", {"hardware", "model"}), "");
}

}  // namespace
}  // namespace memwall
