#pragma once
// An array read as rows of numbers (JsonNumberRows, engine/json_view.h), for the reader
// (engine/json_parser.cpp), which checks the depth and stores the array as one unread node.
#include <cstddef>
#include <string_view>

#include "engine/json_view.h"

namespace crl {

// The array whose '[' is text[open] read as `rows` asks, into rows.cells: the offset one past its ']', or 0
// where it is not of that shape or not taken as JSON (the general reading then reads it, or names the
// error). Only JSON's grammar for such an array is taken, and its numbers by json_scan::scan_number, so what
// is taken is what the general reading would read.
size_t read_number_rows(std::string_view text, size_t open, JsonNumberRows& rows);

}  // namespace crl
