#pragma once
// A protobuf message's bytes with deterministic serialization: map entries sorted by key, so equal messages
// give equal bytes (without it, maps are written in a per-instance hash order and a rerun of the same seed
// writes other bytes). Every file and wire message the engine writes in binary protobuf goes through here.
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/message_lite.h>

#include <string>

namespace crl {

inline std::string deterministic_bytes(const google::protobuf::MessageLite& message) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }  // the coded stream flushes (trims) into `out` when it goes out of scope
  return out;
}

}  // namespace crl
