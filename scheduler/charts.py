"""Pure Plotly figure builders for scheduler pages (no Django): data in, figure out."""

from collections.abc import Iterable
from datetime import datetime, timedelta

import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots


def gpu_usage_figure(rows: Iterable[tuple[str, datetime, float | None, float | None]]) -> go.Figure:
    """Two stacked panels, one line per GPU: utilization (%) and memory used (GiB).
    ``rows`` are (gpu label, time, util %, memory MiB); None values leave gaps."""
    series: dict[str, tuple[list, list, list]] = {}
    for label, at, util, mem in rows:
        xs, utils, mems = series.setdefault(label, ([], [], []))
        xs.append(at)
        utils.append(util)
        mems.append(None if mem is None else round(mem / 1024, 2))
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("Utilization (%)", "Memory used (GiB)"))
    palette = qualitative.Plotly
    for k, (label, (xs, utils, mems)) in enumerate(sorted(series.items())):
        # One colour per GPU in both panels, so the one legend entry names both of its lines.
        line = {"color": palette[k % len(palette)]}
        mode = "lines" if len(xs) > 2 else "lines+markers"  # a job with a sample or two still shows them
        fig.add_trace(go.Scatter(x=xs, y=utils, name=label, mode=mode, legendgroup=label, line=line),
                      row=1, col=1)
        fig.add_trace(go.Scatter(x=xs, y=mems, name=label, mode=mode, legendgroup=label, showlegend=False,
                                 line=line), row=2, col=1)
    fig.update_yaxes(range=[0, 100], row=1, col=1)
    fig.update_yaxes(rangemode="tozero", row=2, col=1)  # never below 0 GiB, even with a single flat value
    times = [at for xs, _u, _m in series.values() for at in xs]
    if times and max(times) - min(times) < timedelta(minutes=2):  # else Plotly zooms to milliseconds
        fig.update_xaxes(range=[min(times) - timedelta(minutes=1), max(times) + timedelta(minutes=1)])
    fig.update_xaxes(title_text="time (UTC)", row=2, col=1)
    fig.update_layout(height=420, margin={"l": 50, "r": 20, "t": 40, "b": 30}, template="plotly_white",
                      legend={"orientation": "h"})
    return fig


WHATIF_SERIES = (("actual", "What happened"), ("baseline", "Replay as configured"), ("changed", "Replay with changes"))
WHATIF_METRICS = (("avg_wait_s", "Average wait (minutes)", 1 / 60), ("gpu_hours", "GPU-hours received", 1.0),
                  ("preemptions", "Preemptions suffered", 1.0))


def whatif_figures(result: dict) -> list[go.Figure]:
    """One grouped bar chart per metric: per team, what happened vs the two replays."""
    teams = sorted(set(result.get("actual", {})) | set(result.get("baseline", {})) | set(result.get("changed", {})))
    figures = []
    for key, title, factor in WHATIF_METRICS:
        fig = go.Figure()
        for series, label in WHATIF_SERIES:
            rows = result.get(series, {})
            fig.add_trace(go.Bar(name=label, x=teams, y=[round(rows.get(t, {}).get(key, 0.0) * factor, 2)
                                                          for t in teams]))
        fig.update_layout(title=title, barmode="group", height=320, template="plotly_white",
                          margin={"l": 50, "r": 20, "t": 50, "b": 40}, legend={"orientation": "h"})
        figures.append(fig)
    return figures
