#include "hyperoffload/ir/status.h"

namespace hyperoffload {

const char* to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidInput: return "invalid input";
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kNotFound: return "not found";
    case ErrorCode::kIo: return "i/o error";
    case ErrorCode::kOutOfMemory: return "out of memory";
    case ErrorCode::kFailedPrecondition: return "failed precondition";
    case ErrorCode::kDiverged: return "diverged";
    case ErrorCode::kInternal: return "internal error";
  }
  return "unknown error";
}

}  // namespace hyperoffload
