#include "engine/jinja/string_methods.h"

#include <algorithm>
#include <vector>

namespace crl::jinja {

namespace {

// Python's str.isspace() for the ASCII range and the common Unicode spaces (as UTF-8 sequences).
size_t space_at(std::string_view s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f)) return 1;
  static const char* const kUnicodeSpaces[] = {"\xc2\x85",     "\xc2\xa0",     "\xe1\x9a\x80", "\xe2\x80\x80",
                                               "\xe2\x80\x81", "\xe2\x80\x82", "\xe2\x80\x83", "\xe2\x80\x84",
                                               "\xe2\x80\x85", "\xe2\x80\x86", "\xe2\x80\x87", "\xe2\x80\x88",
                                               "\xe2\x80\x89", "\xe2\x80\x8a", "\xe2\x80\xa8", "\xe2\x80\xa9",
                                               "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80"};
  for (const char* u : kUnicodeSpaces) {
    const std::string_view w(u);
    if (s.substr(i, w.size()) == w) return w.size();
  }
  return 0;
}

// The code point starting at byte i (its bytes).
std::string_view code_point(std::string_view s, size_t i) {
  size_t n = 1;
  while (i + n < s.size() && (static_cast<unsigned char>(s[i + n]) & 0xC0) == 0x80) ++n;
  return s.substr(i, n);
}

std::vector<std::string> split_whitespace(std::string_view s, int64_t max_split) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && space_at(s, i)) i += space_at(s, i);
    if (i >= s.size()) break;
    if (max_split >= 0 && static_cast<int64_t>(out.size()) == max_split) {
      std::string rest(s.substr(i));
      out.push_back(strip(rest, nullptr, false, true));
      break;
    }
    const size_t start = i;
    while (i < s.size() && !space_at(s, i)) i += code_point(s, i).size();
    out.emplace_back(s.substr(start, i - start));
  }
  return out;
}

}  // namespace

std::string strip(std::string_view s, const std::string* chars, bool left, bool right) {
  const auto strippable = [&](size_t i) -> size_t {
    if (!chars) return space_at(s, i);
    const std::string_view cp = code_point(s, i);
    const std::string_view set(*chars);
    for (size_t k = 0; k < set.size();) {
      const std::string_view c = code_point(set, k);
      if (c == cp) return cp.size();
      k += c.size();
    }
    return 0;
  };
  // Only the ends are looked at (a message of 8k tokens is stripped on every render by most templates). A
  // code point starts at byte 0 or at a byte that is not a continuation byte, as code_point() reads them.
  size_t from = 0, to = s.size();
  if (left) {
    while (from < to && strippable(from)) from += code_point(s, from).size();
  }
  if (right) {
    while (to > from) {
      size_t start = to - 1;
      while (start > from && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      if (!strippable(start)) break;
      to = start;
    }
  }
  return std::string(s.substr(from, to - from));
}

std::string ascii_upper(std::string s) {
  for (char& c : s) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
  }
  return s;
}

std::string ascii_lower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
  }
  return s;
}

std::string ascii_title(std::string s) {
  bool in_word = false;
  for (char& c : s) {
    const bool upper = c >= 'A' && c <= 'Z', lower = c >= 'a' && c <= 'z';
    if (upper || lower) {
      if (!in_word && lower) c = static_cast<char>(c - 32);
      if (in_word && upper) c = static_cast<char>(c + 32);
      in_word = true;
    } else {
      in_word = false;
    }
  }
  return s;
}

std::string ascii_capitalize(std::string s) {
  s = ascii_lower(std::move(s));
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = static_cast<char>(s[0] - 32);
  return s;
}

std::string replace_all(Interpreter& in, const std::string& s, const std::string& from, const std::string& to,
                        int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` around every code point
    const std::vector<size_t> at = utf8_offsets(s);
    for (size_t k = 0; k + 1 < at.size(); ++k) {
      if (count < 0 || static_cast<int64_t>(k) < count) out += to;
      out.append(s, at[k], at[k + 1] - at[k]);
      in.check_size(out.size(), "string");
    }
    if (count < 0 || static_cast<int64_t>(at.size()) - 1 < count) out += to;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    in.check_size(out.size(), "string");
    pos = hit + from.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  in.check_size(out.size(), "string");
  return out;
}

Value call_string_method(Interpreter& in, const std::string& s, const std::string& name,
                         const CallArgs& args) {
  const auto& p = args.positional;
  const auto str_arg = [&](size_t k) -> const std::string& {
    if (k >= p.size() || !p[k].is_string())
      in.fail(ErrorKind::kType, "str." + name + "() expects a string argument");
    return p[k].as_string();
  };
  const auto optional_chars = [&]() -> const std::string* {
    if (p.empty() || p[0].is_none()) return nullptr;
    return &str_arg(0);
  };
  if (name == "strip") return Value(strip(s, optional_chars(), true, true));
  if (name == "lstrip") return Value(strip(s, optional_chars(), true, false));
  if (name == "rstrip") return Value(strip(s, optional_chars(), false, true));
  if (name == "upper") return Value(ascii_upper(s));
  if (name == "lower") return Value(ascii_lower(s));
  if (name == "title") return Value(ascii_title(s));
  if (name == "capitalize") return Value(ascii_capitalize(s));
  if (name == "startswith" || name == "endswith") {
    if (p.empty()) in.fail(ErrorKind::kType, "str." + name + "() takes at least 1 argument");
    List candidates = p[0].is_list() ? p[0].as_list() : List{p[0]};
    for (const Value& c : candidates) {
      if (!c.is_string()) in.fail(ErrorKind::kType, "str." + name + "() takes a str or a tuple of str");
      const std::string& x = c.as_string();
      if (x.size() <= s.size() && (name == "startswith" ? s.compare(0, x.size(), x) == 0
                                                        : s.compare(s.size() - x.size(), x.size(), x) == 0))
        return Value(true);
    }
    return Value(false);
  }
  if (name == "split" || name == "rsplit") {
    const Value* sep = !p.empty() ? &p[0] : args.named_arg("sep");
    const Value* max = p.size() > 1 ? &p[1] : args.named_arg("maxsplit");
    const int64_t max_split = max && max->is_int() ? max->as_int() : -1;
    List out;
    if (!sep || sep->is_none()) {
      if (name == "rsplit" && max_split >= 0)
        in.fail(ErrorKind::kType, "rsplit with maxsplit is not supported");
      for (std::string& part : split_whitespace(s, max_split)) out.push_back(Value(std::move(part)));
      return Value(std::move(out));
    }
    if (!sep->is_string()) in.fail(ErrorKind::kType, "str.split() separator must be a string");
    const std::string& d = sep->as_string();
    if (d.empty()) in.fail(ErrorKind::kType, "empty separator");
    std::vector<std::string> parts;
    if (name == "split") {
      size_t pos = 0;
      while (max_split < 0 || static_cast<int64_t>(parts.size()) < max_split) {
        const size_t hit = s.find(d, pos);
        if (hit == std::string::npos) break;
        parts.push_back(s.substr(pos, hit - pos));
        pos = hit + d.size();
      }
      parts.push_back(s.substr(pos));
    } else {
      size_t end = s.size();
      while (max_split < 0 || static_cast<int64_t>(parts.size()) < max_split) {
        if (end < d.size()) break;
        const size_t hit = s.rfind(d, end - d.size());
        if (hit == std::string::npos) break;
        parts.push_back(s.substr(hit + d.size(), end - hit - d.size()));
        end = hit;
      }
      parts.push_back(s.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
    for (std::string& part : parts) out.push_back(Value(std::move(part)));
    return Value(std::move(out));
  }
  if (name == "splitlines") {
    List out;
    size_t pos = 0;
    while (pos < s.size()) {
      size_t end = s.find_first_of("\n\r", pos);
      if (end == std::string::npos) {
        out.push_back(Value(s.substr(pos)));
        break;
      }
      out.push_back(Value(s.substr(pos, end - pos)));
      pos = end + ((s[end] == '\r' && end + 1 < s.size() && s[end + 1] == '\n') ? 2 : 1);
    }
    return Value(std::move(out));
  }
  if (name == "replace") {
    const int64_t count = p.size() > 2 && p[2].is_int() ? p[2].as_int() : -1;
    return Value(replace_all(in, s, str_arg(0), str_arg(1), count));
  }
  if (name == "find" || name == "rfind" || name == "count") {
    const std::string& x = str_arg(0);
    if (name == "count") {
      if (x.empty()) return Value(static_cast<int64_t>(utf8_length(s) + 1));
      int64_t n = 0;
      for (size_t pos = s.find(x); pos != std::string::npos; pos = s.find(x, pos + x.size())) ++n;
      return Value(n);
    }
    const size_t hit = name == "find" ? s.find(x) : s.rfind(x);
    if (hit == std::string::npos) return Value(int64_t{-1});
    return Value(static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, hit))));
  }
  if (name == "join") {
    if (p.empty()) in.fail(ErrorKind::kType, "str.join() takes an iterable");
    std::string out;
    bool first = true;
    for (const Value& v : p[0].is_list() ? p[0].as_list() : List{}) {
      if (!v.is_string())
        in.fail(ErrorKind::kType, "sequence item: expected str instance, " + v.type_name() + " found");
      if (!first) out += s;
      out += v.as_string();
      first = false;
      in.check_size(out.size(), "string");
    }
    return Value(std::move(out));
  }
  // isdigit, isalpha, isspace, isupper, islower (ASCII)
  if (s.empty()) return Value(false);
  bool all = true, cased = false;
  for (char c : s) {
    const bool upper = c >= 'A' && c <= 'Z', lower = c >= 'a' && c <= 'z';
    cased |= upper || lower;
    if (name == "isdigit") all &= c >= '0' && c <= '9';
    if (name == "isalpha") all &= upper || lower;
    if (name == "isspace") all &= c == ' ' || (c >= '\t' && c <= '\r');
    if (name == "isupper") all &= !lower;
    if (name == "islower") all &= !upper;
  }
  if (name == "isupper" || name == "islower") return Value(all && cased);
  return Value(all);
}

}  // namespace crl::jinja
