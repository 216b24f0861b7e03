#pragma once
// Decimal to double, correctly rounded, without a pass over the text: w * 10^q for a significand w read
// while the number was scanned (engine/json_parser.cpp reads an LLM answer's log-probs, 17 significant digits
// each, with it). Clinger's exact path where w and 10^q are exact doubles, else the Eisel-Lemire algorithm
// (D. Lemire, "Number Parsing at a Gigabyte per Second", Software: Practice and Experience 51(8), 2021; the
// form of Go's strconv): a 64 x 128-bit product with a table of powers of ten, which answers only where it
// is sure of the rounding. Where it is not (a value too close to halfway between two doubles, q outside
// the table, a subnormal or an overflow) it answers nothing and the caller reads the text with
// std::from_chars, so the result is always from_chars' (a differential test checks it on millions of
// numbers).
#include <cstdint>
#include <optional>

namespace crl {

// w * 10^q, negated when `negative`, correctly rounded to the nearest double (ties to even); nullopt where
// this function cannot be sure (read the text with std::from_chars then).
std::optional<double> decimal_to_double(uint64_t w, int q, bool negative);

// The table's entry for 10^q (its 128-bit significand, rounded down, bit 127 set), for its test; false
// where q is outside the table.
bool power_of_ten_significand(int q, uint64_t& hi, uint64_t& lo);

}  // namespace crl
