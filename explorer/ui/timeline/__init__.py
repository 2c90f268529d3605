"""The timeline: tracks of slices drawn with per-pixel level of detail.

``layout`` decides which rows exist and where (pure numpy, no Qt), ``lod`` turns the
visible window of each lane into per-pixel rectangles (pure numpy), ``lane_builder`` makes
a large trace's lane index in a background thread (or maps it from the lane cache),
``axis`` picks tick positions and units, ``colors`` maps kinds to colours, and ``view`` is
the QWidget that paints them and handles the mouse and keys.
"""
