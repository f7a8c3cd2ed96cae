// tsl/platform/protobuf.h for the selection core built outside XLA, against
// the system's protobuf (Debian's libprotobuf-dev, 3.21): the names the core
// uses, under XLA's tsl::protobuf. Protobuf 3.21 reports parse errors through
// ErrorCollector::AddError(const std::string&), the protobuf inside XLA
// through RecordError(absl::string_view); the collector below takes the
// latter, the one the core implements, and forwards the former to it.

#ifndef NVSHMEM_SYSTEM_COMPAT_TSL_PLATFORM_PROTOBUF_H_
#define NVSHMEM_SYSTEM_COMPAT_TSL_PLATFORM_PROTOBUF_H_

#include <string>

#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/message.h"
#include "google/protobuf/text_format.h"

namespace tsl {
namespace protobuf {

using namespace ::google::protobuf;  // NOLINT: all of protobuf, as tsl's alias.

namespace io {

using namespace ::google::protobuf::io;  // NOLINT

class ErrorCollector : public ::google::protobuf::io::ErrorCollector {
 public:
  virtual void RecordError(int line, ColumnNumber column,
                           absl::string_view message) = 0;
  virtual void RecordWarning(int /*line*/, ColumnNumber /*column*/,
                             absl::string_view /*message*/) {}

 private:
  void AddError(int line, ColumnNumber column,
                const std::string& message) final {
    RecordError(line, column, message);
  }
  void AddWarning(int line, ColumnNumber column,
                  const std::string& message) final {
    RecordWarning(line, column, message);
  }
};

}  // namespace io
}  // namespace protobuf
}  // namespace tsl

#endif  // NVSHMEM_SYSTEM_COMPAT_TSL_PLATFORM_PROTOBUF_H_
