// hyperoffload._C: the binding between the Python layer (hyperoffload/*.py)
// and TorchSession. Per op, Python hands over the op's arguments and results
// as they are; finding their tensors and storages happens here, in C++.
// Errors become the exception classes of hyperoffload.errors — the only place
// where the library's error values turn into exceptions.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "hyperoffload/io/file.h"
#include "hyperoffload/io/schedule_json.h"
#include "hyperoffload/io/trace_json.h"
#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/plan/planner.h"
#include "hyperoffload/sim/simulator.h"
#include "torch_session.h"

namespace py = pybind11;

namespace hyperoffload::python {
namespace {

// The exception class for an error kind, from hyperoffload.errors.
py::handle error_class(ErrorKind kind) {
  static PyObject* classes[5] = {};
  const auto index = static_cast<std::size_t>(kind);
  if (classes[index] == nullptr) {
    if (kind == ErrorKind::kInvalidConfig) {
      classes[index] = PyExc_ValueError;
    } else {
      static const char* names[] = {"HyperoffloadError", "DivergenceError", "BudgetError", "DeviceMismatchError"};
      py::object cls = py::module_::import("hyperoffload.errors").attr(names[index]);
      classes[index] = cls.release().ptr();  // kept for the interpreter's lifetime
    }
  }
  return classes[index];
}

[[noreturn]] void raise(const TorchError& error) {
  PyErr_SetString(error_class(error.kind).ptr(), error.message.c_str());
  throw py::error_already_set();
}

void check(const TorchStatus& status) {
  if (!status) raise(status.error());
}

void check(const Status& status) {
  if (!status) raise(TorchError{ErrorKind::kRuntime, status.error().message});
}

template <class T>
T check(Result<T> result) {
  if (!result) raise(TorchError{ErrorKind::kRuntime, result.error().message});
  return std::move(*result);
}

// An op's identity and its in-place arguments, built once per OpOverload.
struct OpInfo {
  std::string name;
  // Schema arguments the op writes (alias_info.is_write): position, name.
  std::vector<std::pair<std::size_t, std::string>> written;
  // A skip_offload region: any tracked input may be written.
  bool all_written = false;
};

// Calls visit(tensor) for a defined tensor argument with storage, or for each
// such tensor in a list argument (Tensor[], Tensor?[]).
template <class Visit>
void for_each_tensor_with_storage(PyObject* object, Visit visit) {
  auto add = [&visit](PyObject* item) {
    if (!THPVariable_Check(item)) return;
    const at::Tensor& tensor = THPVariable_Unpack(item);
    if (tensor.defined() && tensor.has_storage()) visit(tensor);
  };
  if (THPVariable_Check(object)) {
    add(object);
  } else if (PyList_Check(object) || PyTuple_Check(object)) {
    const Py_ssize_t size = PySequence_Fast_GET_SIZE(object);
    PyObject** items = PySequence_Fast_ITEMS(object);
    for (Py_ssize_t i = 0; i < size; ++i) add(items[i]);
  }
}

// Appends the storage of each tensor in an argument (borrowed: the argument
// keeps it alive for the op).
void collect_storages(PyObject* object, std::vector<c10::StorageImpl*>& out) {
  for_each_tensor_with_storage(object,
                               [&out](const at::Tensor& t) { out.push_back(t.storage().unsafeGetStorageImpl()); });
}

// Appends the storage of each tensor in an op's result (owned references).
void collect_results(PyObject* object, std::vector<c10::Storage>& out) {
  for_each_tensor_with_storage(object, [&out](const at::Tensor& t) { out.push_back(t.storage()); });
}

py::dict stats_dict(const TorchSession& torch_session) {
  py::dict stats;
  const Session* session = torch_session.session();
  const bool ran = session != nullptr && session->steps_completed() > 0;
  const StepStats empty;
  const StepStats& s = ran ? session->last_step_stats() : empty;
  stats["kind"] = ran ? py::object(py::str(to_string(s.kind))) : py::object(py::none());
  stats["passthrough"] = torch_session.last_step_passthrough();
  stats["steps"] = torch_session.steps();
  stats["ops"] = s.ops;
  stats["peak_resident_bytes"] = s.peak_resident_bytes;
  stats["resident_at_end_bytes"] = s.resident_at_end_bytes;
  stats["peak_host_bytes"] = s.peak_host_bytes;
  stats["offloaded_bytes"] = s.d2h_bytes;
  stats["d2h_count"] = s.d2h_count;
  stats["d2h_bytes"] = s.d2h_bytes;
  stats["h2d_count"] = s.h2d_count;
  stats["h2d_bytes"] = s.h2d_bytes;
  stats["faults"] = s.faults;
  stats["fault_bytes"] = s.fault_bytes;
  stats["evictions"] = s.evictions;
  stats["end_restores"] = s.end_restores;
  stats["step_ms"] = s.step_ms;
  const auto& budget = torch_session.options().budget_bytes;
  stats["budget_bytes"] = budget ? py::object(py::int_(*budget)) : py::object(py::none());
  std::optional<c10::Device> device = torch_session.device();
  stats["device"] = device ? py::object(py::str(device->str())) : py::object(py::none());
  return stats;
}

class Runtime {
 public:
  Runtime(std::optional<std::int64_t> budget_bytes, std::optional<std::int64_t> host_capacity_bytes,
          std::string planner, int copy_engines, std::optional<std::string> device, py::object compute_stream,
          bool rewarm_once, std::int64_t calibration_bytes) {
    TorchSessionOptions options;
    options.budget_bytes = budget_bytes;
    if (host_capacity_bytes) options.host_capacity_bytes = *host_capacity_bytes;
    options.planner = std::move(planner);
    if (copy_engines != 1 && copy_engines != 2) {
      raise(TorchError{ErrorKind::kInvalidConfig, "copy_engines must be 1 or 2, got " + std::to_string(copy_engines)});
    }
    options.copy_engines = copy_engines == 1 ? CopyEngines::kOne : CopyEngines::kTwo;
    if (device) {
      try {
        options.device = c10::Device(*device);
      } catch (const std::exception& error) {
        raise(TorchError{ErrorKind::kInvalidConfig, "device \"" + *device + "\": " + error.what()});
      }
    }
    options.rewarm = rewarm_once ? RewarmPolicy::kOnce : RewarmPolicy::kNever;
    options.calibration_bytes = calibration_bytes;
    TorchSession::ComputeStreamFn stream_fn;
    if (!compute_stream.is_none()) {
      stream_fn = [compute_stream](c10::Device d) -> Result<std::uintptr_t> {
        py::gil_scoped_acquire gil;
        try {
          return compute_stream(d.str()).cast<std::uintptr_t>();
        } catch (const std::exception& error) {
          return make_error(ErrorCode::kInternal,
                            std::string("asking PyTorch for the compute stream of ") + d.str() + ": " + error.what());
        }
      };
    }
    TorchResult<std::unique_ptr<TorchSession>> session = TorchSession::create(std::move(options), std::move(stream_fn));
    if (!session) raise(session.error());
    session_ = std::move(*session);
  }

  void begin_step() { check(session_->begin_step()); }
  void end_step() { check(session_->end_step()); }
  void abort_step() { session_->abort_step(); }
  bool tracking() const { return session_->tracking(); }

  void begin(const OpInfo& info, py::handle args, py::handle kwargs) {
    if (!session_->tracking()) return;
    inputs_.clear();
    written_.clear();
    PyObject* arg_tuple = args.ptr();
    const bool is_tuple = PyTuple_Check(arg_tuple);
    const Py_ssize_t count = is_tuple ? PyTuple_GET_SIZE(arg_tuple) : 0;
    for (Py_ssize_t i = 0; i < count; ++i) collect_storages(PyTuple_GET_ITEM(arg_tuple, i), inputs_);
    PyObject* kwarg_dict = kwargs.ptr();
    const bool has_kwargs = kwarg_dict != nullptr && PyDict_Check(kwarg_dict) && PyDict_Size(kwarg_dict) > 0;
    if (has_kwargs) {
      PyObject* key = nullptr;
      PyObject* value = nullptr;
      Py_ssize_t position = 0;
      while (PyDict_Next(kwarg_dict, &position, &key, &value)) collect_storages(value, inputs_);
    }
    if (info.all_written) {
      written_ = inputs_;
    } else {
      for (const auto& [index, name] : info.written) {
        if (static_cast<Py_ssize_t>(index) < count) {
          collect_storages(PyTuple_GET_ITEM(arg_tuple, static_cast<Py_ssize_t>(index)), written_);
        } else if (has_kwargs) {
          if (PyObject* value = PyDict_GetItemString(kwarg_dict, name.c_str())) collect_storages(value, written_);
        }
      }
    }
    check(session_->begin_op(info.name, inputs_, written_));
  }

  void end(py::handle out) {
    if (!session_->tracking()) return;
    outputs_.clear();
    collect_results(out.ptr(), outputs_);
    const TorchStatus ended = session_->end_op(outputs_);
    outputs_.clear();
    check(ended);
  }

  void op_failed() { session_->op_failed(); }

  // A TorchDispatchMode's __torch_dispatch__(self, func, types, args, kwargs),
  // whole in C++: the session's mode binds it to itself as an instance
  // attribute (PyTorch wants a plain method), so PyTorch calls it with no
  // Python frame of ours in between (docs/PYTHON.md, "Overhead"). Reports the op around running it; an op that raises ends
  // offloading for the step (TorchSession::op_failed) and the error propagates.
  py::object dispatch(py::handle /*mode*/, py::handle func, py::handle /*types*/, py::handle args,
                      py::handle kwargs) {
    PyObject* kwarg_dict = kwargs.is_none() ? nullptr : kwargs.ptr();
    PyObject* arg_tuple = args.ptr();
    py::tuple empty;
    if (!PyTuple_Check(arg_tuple)) {
      empty = py::reinterpret_steal<py::tuple>(PySequence_Tuple(arg_tuple));  // PyTorch passes a tuple
      if (!empty) throw py::error_already_set();
      arg_tuple = empty.ptr();
    }
    if (!session_->tracking()) return call(func, arg_tuple, kwarg_dict);
    const OpInfo& info = op_info(func);
    begin(info, py::handle(arg_tuple), kwarg_dict != nullptr ? py::handle(kwarg_dict) : py::handle(Py_None));
    PyObject* out = PyObject_Call(func.ptr(), arg_tuple, kwarg_dict);
    if (out == nullptr) {
      session_->op_failed();
      throw py::error_already_set();
    }
    py::object result = py::reinterpret_steal<py::object>(out);
    end(result);
    return result;
  }

  py::object trace_json() const {
    const Session* session = session_->session();
    if (session == nullptr || session->trace() == nullptr) return py::none();
    return py::str(trace_to_json(*session->trace()));
  }
  py::object schedule_json() const {
    const Session* session = session_->session();
    if (session == nullptr || session->schedule() == nullptr) return py::none();
    return py::str(schedule_to_json(*session->schedule()));
  }
  py::object unplanned_peak_bytes() const {
    const Session* session = session_->session();
    if (session == nullptr || session->trace() == nullptr) return py::none();
    return py::int_(unplanned_peak(*session->trace()).bytes);
  }
  py::object floor_bytes() const {
    const Session* session = session_->session();
    if (session == nullptr || !session->floor()) return py::none();
    return py::int_(session->floor()->bytes);
  }
  py::object next_step_kind() const {
    const Session* session = session_->session();
    if (session == nullptr) return py::str("warmup");
    return py::str(to_string(session->next_step_kind()));
  }
  py::object device() const {
    std::optional<c10::Device> device = session_->device();
    if (!device) return py::none();
    return py::str(device->str());
  }
  std::vector<std::string> notes() const {
    const Session* session = session_->session();
    if (session == nullptr) return {};
    return session->notes();
  }
  py::dict stats() const { return stats_dict(*session_); }

  // What the last warmup decided, for OffloadSession.summary(): the plan's
  // numbers and its simulated cost on the warmup's measured op times and copy
  // bandwidths (sim/simulator.h, the session's copy engines). None before a plan.
  py::object plan_summary() const {
    const Session* session = session_->session();
    if (session == nullptr || session->schedule() == nullptr) return py::none();
    const Trace& trace = *session->trace();
    const Schedule& schedule = *session->schedule();
    SimulatorOptions options;
    options.copy_engines = session_->options().copy_engines;
    const SimulationResult simulated = simulate(trace, schedule, options);
    py::dict summary;
    summary["planner"] = schedule.planner;
    summary["ops"] = trace.op_count();
    summary["storages"] = trace.storage_count();
    const auto& budget = session_->options().budget_bytes;
    summary["budget_bytes"] = budget ? py::object(py::int_(*budget)) : py::object(py::none());
    summary["floor_bytes"] = session->floor() ? py::object(py::int_(session->floor()->bytes)) : py::object(py::none());
    summary["unplanned_peak_bytes"] = unplanned_peak(trace).bytes;
    summary["planned_peak_bytes"] = simulated.peak_bytes();
    summary["offloaded_bytes"] = simulated.d2h_bytes;
    summary["offload_count"] = simulated.d2h_count;
    summary["recomputed_bytes"] = 0;  // offload-only planners
    summary["compute_ms"] = simulated.compute_ms;
    summary["stall_ms"] = simulated.stall_ms;
    summary["overhead_percent"] = simulated.overhead_percent();
    py::list notes;
    for (const std::string& note : session->notes()) notes.append(note);
    summary["notes"] = notes;
    return summary;
  }
  std::vector<std::string> take_warnings() { return session_->take_warnings(); }
  std::size_t tracked_storages() const { return session_->tracked_storages(); }

 private:
  static py::object call(py::handle func, PyObject* args, PyObject* kwargs) {
    PyObject* out = PyObject_Call(func.ptr(), args, kwargs);
    if (out == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(out);
  }

  // The OpInfo of an OpOverload, read from its schema by hyperoffload.session._op_info
  // the first time this runtime sees it (OpOverloads live as long as the
  // interpreter; the map holds a reference anyway).
  const OpInfo& op_info(py::handle func) {
    auto found = op_infos_.find(func.ptr());
    if (found != op_infos_.end()) return found->second.second;
    // Kept for the interpreter's lifetime (never destroyed after finalization).
    static PyObject* reader =
        py::object(py::module_::import("hyperoffload.session").attr("_op_info")).release().ptr();
    OpInfo info = py::handle(reader)(func).cast<OpInfo>();
    return op_infos_.emplace(func.ptr(), std::make_pair(py::reinterpret_borrow<py::object>(func), std::move(info)))
        .first->second.second;
  }

  std::unique_ptr<TorchSession> session_;
  std::unordered_map<PyObject*, std::pair<py::object, OpInfo>> op_infos_;
  std::vector<c10::StorageImpl*> inputs_;
  std::vector<c10::StorageImpl*> written_;
  std::vector<c10::Storage> outputs_;
};

}  // namespace
}  // namespace hyperoffload::python

PYBIND11_MODULE(_C, m) {
  using hyperoffload::python::OpInfo;
  using hyperoffload::python::Runtime;
  m.doc() = "hyperoffload's C++ runtime for PyTorch (see hyperoffload.OffloadSession)";

  py::class_<OpInfo>(m, "OpInfo")
      .def(py::init([](std::string name, std::vector<std::pair<std::size_t, std::string>> written, bool all_written) {
             return OpInfo{std::move(name), std::move(written), all_written};
           }),
           py::arg("name"), py::arg("written"), py::arg("all_written") = false)
      .def_readonly("name", &OpInfo::name)
      .def_readonly("written", &OpInfo::written)
      .def_readonly("all_written", &OpInfo::all_written);

  py::class_<Runtime>(m, "Runtime")
      .def(py::init<std::optional<std::int64_t>, std::optional<std::int64_t>, std::string, int,
                    std::optional<std::string>, py::object, bool, std::int64_t>(),
           py::arg("budget_bytes"), py::arg("host_capacity_bytes"), py::arg("planner"), py::arg("copy_engines"),
           py::arg("device"), py::arg("compute_stream"), py::arg("rewarm_once"),
           py::arg("calibration_bytes"))
      .def("begin_step", &Runtime::begin_step)
      .def("end_step", &Runtime::end_step)
      .def("abort_step", &Runtime::abort_step)
      .def("begin", &Runtime::begin, py::arg("info"), py::arg("args"), py::arg("kwargs"))
      .def("end", &Runtime::end, py::arg("out"))
      .def("op_failed", &Runtime::op_failed)
      .def("dispatch", &Runtime::dispatch, py::arg("mode"), py::arg("func"), py::arg("types"),
           py::arg("args") = py::tuple(),
           py::arg("kwargs") = py::none())
      .def_property_readonly("tracking", &Runtime::tracking)
      .def("trace_json", &Runtime::trace_json)
      .def("schedule_json", &Runtime::schedule_json)
      .def("unplanned_peak_bytes", &Runtime::unplanned_peak_bytes)
      .def("floor_bytes", &Runtime::floor_bytes)
      .def("next_step_kind", &Runtime::next_step_kind)
      .def("device", &Runtime::device)
      .def("notes", &Runtime::notes)
      .def("stats", &Runtime::stats)
      .def("plan_summary", &Runtime::plan_summary)
      .def("take_warnings", &Runtime::take_warnings)
      .def("tracked_storages", &Runtime::tracked_storages);

  m.def(
      "write_file_atomically",
      [](const std::string& path, const std::string& contents) {
        hyperoffload::python::check(hyperoffload::write_file_atomically(path, contents));
      },
      py::arg("path"), py::arg("contents"),
      "Writes a file through a temporary file and a rename: never a partial file.");
  m.def(
      "planner_names",
      [] {
        std::vector<std::string> names;
        for (std::string_view name : hyperoffload::planner_names()) names.emplace_back(name);
        names.emplace_back(hyperoffload::kOptimalPlannerName);
        return names;
      },
      "Every planner name OffloadConfig.planner accepts: the heuristic planners in the order reports list them, "
      "then the MILP planner (\"optimal\", for small steps).");
  m.def(
      "unplanned_peak",
      [](const std::string& trace_json) {
        hyperoffload::Trace trace = hyperoffload::python::check(hyperoffload::parse_trace_json(trace_json));
        const hyperoffload::PeakBytes peak = hyperoffload::unplanned_peak(trace);
        return std::make_pair(peak.bytes, peak.op);
      },
      py::arg("trace_json"),
      "(bytes, op) of a hyperoffload.trace document's unplanned op-granular peak: storages resident from their "
      "first to their last access, retained ones to the end.");
}
