// VtkFormat::vtu: every rank's piece as a .vtu file (VTK's XML writer: raw binary appended data, zlib,
// UInt64 headers), the step's .pvtu and the .pvd time series (written by hand on rank 0). Only the
// pieces need VTK; without it vtu_piece_bytes throws Error(unsupported).
#include <bit>
#include <charconv>

#include "surrogate/vtk.hpp"
#include "vtk_detail.hpp"

#ifdef SURROGATE_HAVE_VTK
#include <vtkCallbackCommand.h>
#include <vtkCellArray.h>
#include <vtkCommand.h>
#include <vtkDoubleArray.h>
#include <vtkErrorCode.h>
#include <vtkExecutive.h>
#include <vtkFieldData.h>
#include <vtkFloatArray.h>
#include <vtkIdTypeArray.h>
#include <vtkNew.h>
#include <vtkPointData.h>
#include <vtkPoints.h>
#include <vtkStringArray.h>
#include <vtkUnsignedCharArray.h>
#include <vtkUnstructuredGrid.h>
#include <vtkXMLUnstructuredGridWriter.h>
#endif

namespace surrogate::vtk_detail {

std::string number(double value) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

namespace {

const char* byte_order() { return std::endian::native == std::endian::little ? "LittleEndian" : "BigEndian"; }

#ifdef SURROGATE_HAVE_VTK
/// Collects the messages of a VTK object's ErrorEvent instead of letting VTK print them.
void collect_vtk_error(vtkObject*, unsigned long, void* client, void* call) {
  auto& text = *static_cast<std::string*>(client);
  std::string message = call ? static_cast<const char*>(call) : "unknown VTK error";
  // "ERROR: In file, line N\nvtkClass (0x...): message" -> "message"
  if (const std::size_t p = message.find("): "); p != std::string::npos) message = message.substr(p + 3);
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  if (text.empty()) text = message;
}

template <class Array, class Real>
vtkSmartPointer<vtkDataArray> point_array(const StagedArray& a, Strided<const Real> v, std::int64_t n) {
  auto array = vtkSmartPointer<Array>::New();
  array->SetName(a.name.c_str());
  array->SetNumberOfComponents(a.components);
  array->SetNumberOfTuples(static_cast<vtkIdType>(n));
  Real* out = n > 0 ? array->GetPointer(0) : nullptr;
  for (std::int64_t i = 0; i < n; ++i)
    for (int j = 0; j < a.components; ++j)
      out[i * a.components + j] = v.data[i * v.point_stride + j * v.component_stride];
  return array;
}
#endif

}  // namespace

/// This rank's piece: points padded to 3-D (Float64), its cells or one vertex per point, the staged
/// arrays, and the FieldData "units" (one "name: unit" per array with a unit) and "TimeValue".
/// The piece of this rank as bytes (VTK's XML writer into memory); the caller writes them through an
/// OutputFile.
std::string vtu_piece_bytes(const Step& s, const std::string& file, const std::string& context) {
  const std::int64_t n = s.n;
#ifdef SURROGATE_HAVE_VTK
  static_assert(sizeof(vtkIdType) == sizeof(std::int64_t), "VTK must use 64-bit ids");
  vtkNew<vtkUnstructuredGrid> grid;
  vtkNew<vtkPoints> points;
  points->SetDataTypeToDouble();
  points->SetNumberOfPoints(static_cast<vtkIdType>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    double p[3] = {0, 0, 0};
    for (int j = 0; j < s.dim; ++j) p[j] = s.coords.data[i * s.coords.point_stride + j * s.coords.component_stride];
    points->SetPoint(static_cast<vtkIdType>(i), p);
  }
  grid->SetPoints(points);

  vtkNew<vtkIdTypeArray> offsets, connectivity;
  vtkNew<vtkUnsignedCharArray> types;
  if (s.has_cells) {
    const auto cells = static_cast<vtkIdType>(s.offsets.size());
    offsets->SetNumberOfValues(cells + 1);
    offsets->SetValue(0, 0);
    for (vtkIdType c = 0; c < cells; ++c) offsets->SetValue(c + 1, s.offsets[static_cast<std::size_t>(c)]);
    connectivity->SetNumberOfValues(static_cast<vtkIdType>(s.connectivity.size()));
    for (std::size_t k = 0; k < s.connectivity.size(); ++k)
      connectivity->SetValue(static_cast<vtkIdType>(k), s.connectivity[k]);
    types->SetNumberOfValues(cells);
    for (vtkIdType c = 0; c < cells; ++c) types->SetValue(c, s.types[static_cast<std::size_t>(c)]);
  } else {  // one vertex per point, so that ParaView draws the points
    offsets->SetNumberOfValues(static_cast<vtkIdType>(n + 1));
    for (std::int64_t i = 0; i <= n; ++i) offsets->SetValue(static_cast<vtkIdType>(i), i);
    connectivity->SetNumberOfValues(static_cast<vtkIdType>(n));
    types->SetNumberOfValues(static_cast<vtkIdType>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      connectivity->SetValue(static_cast<vtkIdType>(i), i);
      types->SetValue(static_cast<vtkIdType>(i), static_cast<unsigned char>(VtkCell::vertex));
    }
  }
  vtkNew<vtkCellArray> cells;
  cells->SetData(offsets, connectivity);
  grid->SetCells(types, cells);

  vtkNew<vtkStringArray> units;
  units->SetName("units");
  for (const StagedArray& a : s.arrays) {
    grid->GetPointData()->AddArray(a.single ? point_array<vtkFloatArray>(a, a.f32, n)
                                            : point_array<vtkDoubleArray>(a, a.f64, n));
    if (!a.unit.empty()) units->InsertNextValue(a.name + ": " + a.unit);
  }
  if (units->GetNumberOfValues() > 0) grid->GetFieldData()->AddArray(units);
  vtkNew<vtkDoubleArray> time_value;
  time_value->SetName("TimeValue");
  time_value->InsertNextValue(s.time);
  grid->GetFieldData()->AddArray(time_value);

  std::string vtk_error;
  vtkNew<vtkCallbackCommand> on_error;
  on_error->SetCallback(collect_vtk_error);
  on_error->SetClientData(&vtk_error);
  vtkNew<vtkXMLUnstructuredGridWriter> writer;
  writer->AddObserver(vtkCommand::ErrorEvent, on_error);
  writer->GetExecutive()->AddObserver(vtkCommand::ErrorEvent, on_error);  // "Algorithm ... returned failure"
  writer->WriteToOutputStringOn();
  writer->SetInputData(grid);
  writer->SetDataModeToAppended();
  writer->EncodeAppendedDataOff();  // raw binary, not base64
  writer->SetHeaderTypeToUInt64();
  writer->SetCompressorTypeToZLib();
  const int ok = writer->Write();
  if (!ok || !vtk_error.empty() || writer->GetErrorCode() != vtkErrorCode::NoError) {
    std::string why = vtk_error;
    if (why.empty()) why = vtkErrorCode::GetStringFromErrorCode(writer->GetErrorCode());
    throw Error(ErrorCode::io, context + ": cannot write piece '" + file + "': " + why);
  }
  return writer->GetOutputString();
#else
  (void)s, (void)n;
  throw Error(ErrorCode::unsupported, context + ": cannot write piece '" + file + "': this build of surrogate has no VTK");
#endif
}

std::string pvtu_text(std::span<const StagedArray> arrays, const std::string& stem, int pieces) {
  std::string x = "<?xml version=\"1.0\"?>\n";
  x += "<VTKFile type=\"PUnstructuredGrid\" version=\"1.0\" byte_order=\"";
  x += byte_order();
  x += "\" header_type=\"UInt64\">\n  <PUnstructuredGrid GhostLevel=\"0\">\n";
  if (!arrays.empty()) {
    x += "    <PPointData>\n";
    for (const StagedArray& a : arrays)
      x += "      <PDataArray type=\"" + std::string(a.type()) + "\" Name=\"" + a.name + "\" NumberOfComponents=\"" +
           std::to_string(a.components) + "\"/>\n";
    x += "    </PPointData>\n";
  }
  x += "    <PPoints>\n      <PDataArray type=\"Float64\" Name=\"Points\" NumberOfComponents=\"3\"/>\n    </PPoints>\n";
  for (int r = 0; r < pieces; ++r) x += "    <Piece Source=\"" + stem + "/piece_" + std::to_string(r) + ".vtu\"/>\n";
  x += "  </PUnstructuredGrid>\n</VTKFile>\n";
  return x;
}

std::string pvd_text(const SeriesIndex& series) {
  std::string x = "<?xml version=\"1.0\"?>\n<VTKFile type=\"Collection\" version=\"0.1\" byte_order=\"";
  x += byte_order();
  x += "\">\n  <Collection>\n";
  for (const auto& [time, file] : series)
    x += "    <DataSet timestep=\"" + number(time) + "\" group=\"\" part=\"0\" file=\"" + file + "\"/>\n";
  x += "  </Collection>\n</VTKFile>\n";
  return x;
}

}  // namespace surrogate::vtk_detail
