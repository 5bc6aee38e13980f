"""Opens a surrogate VTK series (surrogate::VtkSeries) with ParaView and checks it; run by pvbatch:

    share/tools/pvbatch-headless share/tools/check_vtk.py expect.json

expect.json (tests/vtk/vtk_paraview_case.cpp writes one):
    pvtu, pvtu_time   one step's .pvtu and its time (the vtu format)
    step_file, step_time  or one step's VTKHDF file (.hdf) and its time (the vtkhdf format)
    pvd, times        the series file (.pvd, or .hdf.series for VTKHDF) and its time steps
    points, cells     global counts (every step); points may be [lo, hi] for pieces that repeat shared
                      (ghost) vertices
    pieces            pieces listed in each .pvtu (one per rank; not checked for VTKHDF files)
    arrays            {name: {"components": n, "ranges": {time or "*": [[lo, hi] per component]} or null}};
                      null ranges: only checked to be finite
    units             {name: unit}, from the pieces' FieldData string array "units" ("name: unit" entries)
    color_by, png     the point array to colour by and where to save an 800x600 screenshot of the last step
    camera            optional, "feature": for a closed surface around its centre (a sphere), look from the
                      direction of the point where color_by is farthest from its mean, so that the feature
                      faces the viewer (default: ParaView's reset camera)

Prints what ParaView sees (counts, arrays, components, ranges, units, time steps, the PNG) and every
mismatch; exit status 0 when everything matches, 1 otherwise, 2 on bad usage.
"""
import json
import math
import os
import sys
import xml.etree.ElementTree as ET

from paraview import servermanager
from paraview.simple import (ColorBy, CreateView, Delete, OpenDataFile, Render, SaveScreenshot, Show)

errors = []


def check(condition, message):
    if not condition:
        errors.append(message)
        print("MISMATCH: " + message)


def close(a, b):
    return abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))


def expected_ranges(spec, time):
    ranges = spec.get("ranges")
    if ranges is None:
        return None
    for key, value in ranges.items():
        if key != "*" and close(float(key), time):
            return value
    return ranges.get("*")


def first_dataset(data):
    """The dataset itself, or the first leaf of a composite one."""
    if data is not None and data.IsA("vtkCompositeDataSet"):
        it = data.NewIterator()
        it.InitTraversal()
        return None if it.IsDoneWithTraversal() else it.GetCurrentDataObject()
    return data


def check_dataset(label, source, time, expect):
    source.UpdatePipeline(time)
    info = source.GetDataInformation()
    points, cells = info.GetNumberOfPoints(), info.GetNumberOfCells()
    print("%s at t=%g: %d points, %d cells" % (label, time, points, cells))
    want = expect["points"]
    if isinstance(want, list):  # [lo, hi]: pieces that repeat the vertices they share (ghosts)
        check(want[0] <= points <= want[1], "%s t=%g: %d points, expected %d..%d" % (label, time, points, want[0], want[1]))
    else:
        check(points == want, "%s t=%g: %d points, expected %d" % (label, time, points, want))
    check(cells == expect["cells"], "%s t=%g: %d cells, expected %d" % (label, time, cells, expect["cells"]))

    names = list(source.PointData.keys())
    check(sorted(names) == sorted(expect["arrays"]),
          "%s t=%g: point arrays %s, expected %s" % (label, time, sorted(names), sorted(expect["arrays"])))
    for name, spec in expect["arrays"].items():
        if name not in names:
            continue
        array = source.PointData[name]
        components = array.GetNumberOfComponents()
        ranges = [array.GetRange(c) for c in range(components)]
        print("  point array '%s': %d component(s), range(s) %s"
              % (name, components, ", ".join("[%.9g, %.9g]" % r for r in ranges)))
        check(components == spec["components"],
              "%s t=%g: '%s' has %d components, expected %d" % (label, time, name, components, spec["components"]))
        want = expected_ranges(spec, time)
        if want is None:
            check(all(math.isfinite(v) for r in ranges for v in r), "%s t=%g: '%s' is not finite" % (label, time, name))
            continue
        for c, (got, exp) in enumerate(zip(ranges, want)):
            check(close(got[0], exp[0]) and close(got[1], exp[1]),
                  "%s t=%g: '%s' component %d range [%.17g, %.17g], expected [%.17g, %.17g]"
                  % (label, time, name, c, got[0], got[1], exp[0], exp[1]))

    data = first_dataset(servermanager.Fetch(source))
    field = data.GetFieldData() if data is not None else None
    units_array = field.GetAbstractArray("units") if field is not None else None
    units = {}
    if units_array is not None:
        for i in range(units_array.GetNumberOfValues()):
            name, _, unit = units_array.GetVariantValue(i).ToString().partition(": ")
            units[name] = unit
    print("  units (FieldData 'units'): %s" % ", ".join("%s [%s]" % kv for kv in sorted(units.items())))
    check(units == expect["units"], "%s t=%g: units %s, expected %s" % (label, time, units, expect["units"]))
    time_value = field.GetArray("TimeValue") if field is not None else None
    check(time_value is not None and close(time_value.GetComponent(0, 0), time),
          "%s t=%g: FieldData TimeValue %s" % (label, time, None if time_value is None else time_value.GetComponent(0, 0)))


def point_values(source, name, time):
    """(points, values of the point array `name`) at `time`, every piece, as numpy arrays."""
    import numpy as np
    from vtkmodules.util.numpy_support import vtk_to_numpy
    source.UpdatePipeline(time)
    data = servermanager.Fetch(source)
    leaves = []
    if data is not None and data.IsA("vtkCompositeDataSet"):
        it = data.NewIterator()
        it.InitTraversal()
        while not it.IsDoneWithTraversal():
            leaves.append(it.GetCurrentDataObject())
            it.GoToNextItem()
    elif data is not None:
        leaves.append(data)
    points = [vtk_to_numpy(d.GetPoints().GetData()) for d in leaves if d.GetNumberOfPoints() > 0]
    values = [vtk_to_numpy(d.GetPointData().GetArray(name)) for d in leaves if d.GetNumberOfPoints() > 0]
    return np.concatenate(points).astype(float), np.concatenate(values).astype(float)


def aim_at_feature(view, source, name, time):
    """Camera on the line from the data's centre through the point where `name` is farthest from its mean,
    looking at the centre; the colour range is the data's (set by the caller). Prints what it chose."""
    import numpy as np
    points, values = point_values(source, name, time)
    if values.ndim > 1:
        values = np.linalg.norm(values, axis=1)
    k = int(np.argmax(np.abs(values - values.mean())))
    lo, hi = points.min(axis=0), points.max(axis=0)
    centre, radius = (lo + hi) / 2, float(np.linalg.norm(hi - lo)) / 2
    direction = points[k] - centre
    if np.linalg.norm(direction) < 1e-12 * max(radius, 1e-300):
        print("camera: the feature is at the centre; ParaView's reset camera kept")
        return
    direction /= np.linalg.norm(direction)
    up = np.array([0.0, 0.0, 1.0]) if abs(direction[2]) < 0.9 else np.array([0.0, 1.0, 0.0])
    up -= direction * up.dot(direction)
    view.CameraFocalPoint = list(centre)
    view.CameraPosition = list(centre + 4.0 * radius * direction)
    view.CameraViewUp = list(up / np.linalg.norm(up))
    view.ResetCamera()  # keeps the direction, fits the distance
    print("camera: looking at (%.3f, %.3f, %.3f), where '%s' = %.4g is farthest from its mean %.4g (range %.4g .. %.4g)"
          % (points[k][0], points[k][1], points[k][2], name, values[k], values.mean(), values.min(), values.max()))


def check_pvtu_pieces(path, pieces):
    root = ET.parse(path).getroot()
    sources = [p.get("Source") for p in root.iter("Piece")]
    print("%s: %d pieces" % (os.path.basename(path), len(sources)))
    check(len(sources) == pieces, "%s lists %d pieces, expected %d" % (path, len(sources), pieces))
    for source in sources:
        check(os.path.isfile(os.path.join(os.path.dirname(path), source)), "%s: piece %s is missing" % (path, source))


def check_png(path):
    from vtkmodules.vtkIOImage import vtkPNGReader
    size = os.path.getsize(path) if os.path.isfile(path) else 0
    check(size > 5000, "screenshot %s: %d bytes" % (path, size))
    if size == 0:
        return
    reader = vtkPNGReader()
    reader.SetFileName(path)
    reader.Update()
    image = reader.GetOutput()
    width, height, _ = image.GetDimensions()
    scalars = image.GetPointData().GetScalars()
    n, k = scalars.GetNumberOfTuples(), min(3, scalars.GetNumberOfComponents())
    pixels = [tuple(int(scalars.GetComponent(i, c)) for c in range(k)) for i in range(0, n, 7)]
    background = pixels[0]
    colours = len(set(pixels))
    covered = sum(p != background for p in pixels) / float(len(pixels))
    print("screenshot: %s, %d bytes, %dx%d, %d colours in a 1/7 sample, %.0f%% not background"
          % (path, size, width, height, colours, 100 * covered))
    check((width, height) == (800, 600), "screenshot is %dx%d, expected 800x600" % (width, height))
    check(colours >= 16, "screenshot has only %d colours" % colours)
    check(covered >= 0.1, "screenshot is mostly background (%.1f%% covered)" % (100 * covered))


def main():
    if len(sys.argv) != 2:
        print("usage: pvbatch check_vtk.py expect.json")
        return 2
    with open(sys.argv[1]) as f:
        expect = json.load(f)

    if "pvtu" in expect:
        pvtu = OpenDataFile(expect["pvtu"])
        check(pvtu is not None, "ParaView cannot open %s" % expect["pvtu"])
        if pvtu is not None:
            print("%s: reader %s" % (expect["pvtu"], pvtu.GetXMLName()))
            check_pvtu_pieces(expect["pvtu"], expect["pieces"])
            check_dataset("pvtu", pvtu, expect["pvtu_time"], expect)
    if "step_file" in expect:
        step = OpenDataFile(expect["step_file"])
        check(step is not None, "ParaView cannot open %s" % expect["step_file"])
        if step is not None:
            print("%s: reader %s" % (expect["step_file"], step.GetXMLName()))
            check_dataset("step file", step, expect["step_time"], expect)

    pvd = OpenDataFile(expect["pvd"])
    check(pvd is not None, "ParaView cannot open %s" % expect["pvd"])
    if pvd is None:
        return 1
    times = list(pvd.TimestepValues) if pvd.TimestepValues else []
    print("%s: reader %s, time steps %s" % (expect["pvd"], pvd.GetXMLName(), times))
    check(len(times) == len(expect["times"]) and all(close(a, b) for a, b in zip(times, expect["times"])),
          "time steps %s, expected %s" % (times, expect["times"]))
    for t in times:
        check_dataset("pvd", pvd, t, expect)

    view = CreateView("RenderView")
    view.ViewSize = [800, 600]
    view.OrientationAxesVisibility = 0
    view.ViewTime = times[-1] if times else 0.0
    display = Show(pvd, view)
    display.PointSize = 8  # point clouds (vertex cells) drawn as visible dots; no effect on surfaces
    ColorBy(display, ("POINTS", expect["color_by"]))
    display.RescaleTransferFunctionToDataRange(True, False)
    display.SetScalarBarVisibility(view, True)
    view.ResetCamera()
    if expect.get("camera") == "feature":
        aim_at_feature(view, pvd, expect["color_by"], view.ViewTime)
    Render(view)
    if os.path.exists(expect["png"]):
        os.remove(expect["png"])
    SaveScreenshot(expect["png"], view, ImageResolution=[800, 600])
    check_png(expect["png"])
    # Release the render window before the interpreter shuts down (else GLXBadContext at exit under Xvfb).
    Delete(display)
    Delete(view)
    del display, view

    print("check_vtk: %s" % ("OK" if not errors else "%d mismatch(es)" % len(errors)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
