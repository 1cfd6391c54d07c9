// Echoing untrusted text (argv, config files, environment) into messages.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ssd {

// Length of the well-formed UTF-8 sequence at s[i] (1..4), or 0 when the bytes there are not one
// (stray continuation byte, overlong form, surrogate, beyond U+10FFFF, cut short).
inline size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // legal range of the second byte
  if (c >= 0xc2 && c <= 0xdf) n = 2;
  else if (c == 0xe0) n = 3, lo = 0xa0;
  else if (c >= 0xe1 && c <= 0xec) n = 3;
  else if (c == 0xed) n = 3, hi = 0x9f;
  else if (c >= 0xee && c <= 0xef) n = 3;
  else if (c == 0xf0) n = 4, lo = 0x90;
  else if (c >= 0xf1 && c <= 0xf3) n = 4;
  else if (c == 0xf4) n = 4, hi = 0x8f;
  else return 0;
  if (i + n > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xbf) return 0;
  return n;
}

// `s` with control bytes (C0, DEL, the C1 range U+0080..U+009F; also newline and tab) and bytes
// that are not well-formed UTF-8 written as \xNN, so a message can neither drive the terminal (ESC
// sequences), be cut short (NUL), forge extra lines, nor make a JSON serializer throw. Other text,
// including UTF-8, is unchanged.
// keep_line_breaks keeps '\n' and '\t' (for whole messages that are multi-line by design, such as
// compile logs). Applying it twice changes nothing more.
inline std::string printable(std::string_view s, bool keep_line_breaks = false) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const bool control = (c < 0x20 || c == 0x7f) && !(keep_line_breaks && (c == '\n' || c == '\t'));
    size_t n = control ? 0 : utf8_sequence_length(s, i);
    // C1 controls (U+0080..U+009F, 0xC2 0x80..0x9F) are valid UTF-8 but some terminals obey them.
    if (n == 2 && c == 0xc2 && static_cast<unsigned char>(s[i + 1]) <= 0x9f) n = 0;
    if (n == 0) {
      out += "\\x";
      out += digits[c >> 4];
      out += digits[c & 15];
      ++i;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  return out;
}

// At most `max_bytes` of `s`, cut at a character boundary, with "..." appended when cut.
inline std::string shortened(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return std::string(s);
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80) --cut;  // not inside a sequence
  return std::string(s.substr(0, cut)) + "...";
}

}  // namespace ssd
