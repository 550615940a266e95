// "Did you mean ...?" for a mistyped name: a key of a config file, a command-line option, a scenario.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace memwall {

// Edits (an insertion, a deletion, a substitution, or two neighbours swapped) that turn `a` into `b`,
// ignoring ASCII case (so a name in the wrong case is suggested in the right one).
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate `word` is most likely a typo of: the nearest in edit distance when it is at most a third of
// the longer name's length away (at least one edit), else the only candidate `word` is a prefix of (three
// characters or more). Empty when none is, when `word` is itself a candidate, or when two are equally near.
std::string closest_name(std::string_view word, const std::vector<std::string>& candidates);

// " (did you mean 'NAME'?)" for closest_name's answer, or "" when it has none.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace memwall
