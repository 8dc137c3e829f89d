#include "modload_report.hpp"

#include "gpuinit/base/json.hpp"
#include "gpuinit/base/text.hpp"
#include "gpuinit/modules/failures.hpp"

#include <algorithm>

namespace gpuinit::tools {

namespace {

const char* step_verb(ModuleStep::Kind kind, bool dry_run) {
    switch (kind) {
    case ModuleStep::Kind::Insert:
        return dry_run ? "insmod" : "loaded";
    case ModuleStep::Kind::AlreadyLoaded:
        return "already-loaded";
    case ModuleStep::Kind::Builtin:
        return "builtin";
    case ModuleStep::Kind::RunInstall:
        return dry_run ? "install" : "installed";
    }
    return "?";
}

bool is_danger(const Diagnostic& diagnostic) {
    return diagnostic.reason == static_cast<int>(ModuleFailure::CheckDanger);
}

} // namespace

Rendered render_steps_text(const StepsReport& report, int verbosity) {
    Rendered rendered;
    if (verbosity > 0 && !report.modules_dir.empty()) {
        rendered.out += "gpu-modload: module index " + report.modules_dir + "\n";
    }
    if (verbosity >= 0) {
        for (const ModuleStep& step : report.steps) {
            std::string detail;
            if (step.kind == ModuleStep::Kind::RunInstall) {
                detail = step.command;
            } else if (step.kind == ModuleStep::Kind::Insert) {
                detail = step.path + (step.options.empty() ? "" : " " + step.options);
            } else {
                detail = "left alone";
            }
            rendered.out +=
                format("%-15s %-16s ", step_verb(step.kind, report.dry_run), step.name.c_str()) +
                printable(detail) + "\n";
        }
    }
    render_diagnostics("gpu-modload", report.diagnostics, verbosity, rendered);
    return rendered;
}

std::string render_steps_json(const StepsReport& report) {
    JsonWriter json;
    json.begin_object()
        .key("dry_run")
        .value(report.dry_run)
        .key("exit_code")
        .value(report.exit_code);
    // One key: a refused load has one error per bad option, all of them in
    // "diagnostics".
    for (const Diagnostic& diagnostic : report.diagnostics.items()) {
        if (diagnostic.severity == Severity::Error) {
            json.key("error").value(diagnostic.text());
            break;
        }
    }
    json.key("steps").begin_array();
    for (const ModuleStep& step : report.steps) {
        json.begin_object();
        json.key("action").value(step_verb(step.kind, true));
        json.key("module").value(step.name);
        json.key("path").value(step.path);
        json.key("options").value(step.options);
        json.key("command").value(step.command);
        json.end_object();
    }
    json.end_array();
    json.key("diagnostics");
    write_diagnostics_json(json, report.diagnostics);
    json.end_object();
    return json.str();
}

Rendered render_check_text(const CheckReport& report, int verbosity) {
    Rendered rendered;
    if (!report.check) {
        render_diagnostics("gpu-modload", report.diagnostics, verbosity, rendered);
        return rendered;
    }
    const DriverCheck& check = *report.check;
    if (!check.driver_loaded) {
        rendered.err +=
            "gpu-modload: the nvidia driver is not loaded (no " + report.params_path + ")\n";
        render_diagnostics("gpu-modload", report.diagnostics, verbosity, rendered);
        return rendered;
    }
    if (verbosity >= 0) {
        auto origin = [&](const char* name) {
            const auto& missing = check.not_in_params;
            return std::find(missing.begin(), missing.end(), name) == missing.end()
                       ? ""
                       : "  (not in params: the driver's default)";
        };
        auto& out = rendered.out;
        out += format("DeviceFileUID      %llu%s\n", static_cast<unsigned long long>(check.uid),
                      origin("DeviceFileUID"));
        out += format("DeviceFileGID      %llu%s\n", static_cast<unsigned long long>(check.gid),
                      origin("DeviceFileGID"));
        out += format("DeviceFileMode     %s (%llu)%s\n",
                      format_mode(static_cast<unsigned>(check.mode)).c_str(),
                      static_cast<unsigned long long>(check.mode), origin("DeviceFileMode"));
        out += format("ModifyDeviceFiles  %llu%s\n",
                      static_cast<unsigned long long>(check.modify_device_files),
                      origin("ModifyDeviceFiles"));
        out += "policy             " + printable(check.policy_source) + "\n";
    }
    bool dangers = false;
    for (const Diagnostic& diagnostic : report.diagnostics.items()) {
        if (is_danger(diagnostic)) {
            rendered.err += "gpu-modload: DANGER: " + printable(diagnostic.text()) + "\n";
            dangers = true;
        } else if (diagnostic.severity == Severity::Error || verbosity >= 0) {
            rendered.err += std::string("gpu-modload: ") + severity_name(diagnostic.severity) +
                            ": " + printable(diagnostic.text()) + "\n";
        }
    }
    if (!dangers && verbosity >= 0) {
        rendered.out += "gpu-modload: the driver's parameters cannot undo or widen the policy\n";
    }
    return rendered;
}

std::string render_check_json(const CheckReport& report) {
    JsonWriter json;
    json.begin_object();
    json.key("driver_loaded").value(report.check && report.check->driver_loaded);
    json.key("exit_code").value(report.exit_code);
    if (report.check && report.check->driver_loaded) {
        const DriverCheck& check = *report.check;
        json.key("DeviceFileUID").value(check.uid).key("DeviceFileGID").value(check.gid);
        json.key("DeviceFileMode").value(format_mode(static_cast<unsigned>(check.mode)));
        json.key("ModifyDeviceFiles").value(check.modify_device_files);
        json.key("policy").value(check.policy_source);
        json.key("not_in_params").begin_array();
        for (const std::string& name : check.not_in_params) {
            json.value(name);
        }
        json.end_array();
    }
    json.key("dangers").begin_array();
    for (const Diagnostic& diagnostic : report.diagnostics.items()) {
        if (is_danger(diagnostic)) {
            json.value(diagnostic.text());
        }
    }
    json.end_array();
    json.key("diagnostics");
    write_diagnostics_json(json, report.diagnostics);
    json.end_object();
    return json.str();
}

} // namespace gpuinit::tools
