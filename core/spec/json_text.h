// A JSON file's text as a JSON object, with errors that name the file: where the syntax breaks ("not valid
// JSON: parse error at line 3, column 5: ..."), or that the top level is not an object.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "base/status.h"

namespace memwall {

Result<nlohmann::json> parse_json_object(std::string_view text, const std::string& source);

// A JSON library error's message without its "[json.exception.parse_error.101] " prefix.
std::string json_error_text(const nlohmann::json::exception& e);

}  // namespace memwall
