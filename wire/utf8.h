#pragma once
// The UTF-8 checks of the wire layer (server/, envs/remote/, the gateway): engine/utf8.h's, under crl::wire
// where those callers name them.
#include "engine/utf8.h"

namespace crl::wire {

using crl::is_valid_utf8;
using crl::utf8_sequence;
using crl::Utf8Sequence;
using crl::valid_utf8;

}  // namespace crl::wire
